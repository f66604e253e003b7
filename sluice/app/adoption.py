"""Adopting a history: versions for the events an aggregate type had before an
``Aggregate`` class read them (docs/concepts/aggregates.md, "Adopting an existing
history").

An app that appended events of type T with plain ``tx.append`` and later writes an
``Aggregate`` for T finds its old aggregates empty: a load reads ``aggregate_events``,
which has no row for them. ``adopt_history(store, T)`` gives every id of T that has no
version row yet the versions 1..n of its events in ``seq`` order (the id read from each
payload's key field, the app's ``aggregate(T, key=...)``), which is exactly what saving
them one by one would have written.

It is safe to run again, and to stop at any point: ids are adopted whole, in chunks of
one transaction each, and an id that has version rows is never touched again (a second
run adopts nothing and says so). An id that already has version rows (saved by the
aggregate before the adoption) is left as it is; the events of such ids that have no
version are reported, not changed: they were appended beside the aggregate, and only
the app knows whether they belong to it.

The fold needs every event of an aggregate in the ``events`` table; the archive moves
old ones into segments (``sluice.history.archive``), which loads do not read. Adoption
so refuses a type the archive holds events of, and takes the lock the archive takes
before moving a type's events (``ARCHIVE_LOCK``), then checks again: an archive run
and an adoption of one type never interleave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sluice.events import AGGREGATES
from sluice.history.archive import archive_lock
from sluice.store import Store, Tx

# Version rows per transaction: an id's events are never split, so a chunk may be
# bigger by one id's history.
CHUNK_ROWS = 5_000
# Ids named in the report of events left without versions.
EXAMPLES = 5

_COLUMNS = ("aggregate", "aggregate_id", "version", "event_id")


class AdoptionRefused(Exception):
    """Adoption cannot be done as asked; nothing was written (the message says why and
    what to do)."""


@dataclass(frozen=True)
class Adoption:
    """What ``adopt_history`` did: ``ids`` adopted and the ``events`` given versions; of
    the ids that already had versions, ``left_events`` events without one (in
    ``left_ids`` ids, ``examples`` a few of them), not changed; ``without_id`` events
    whose payload has no id."""

    aggregate: str
    ids: int = 0
    events: int = 0
    left_ids: int = 0
    left_events: int = 0
    examples: tuple[str, ...] = field(default=())
    without_id: int = 0

    def lines(self) -> list[str]:
        """The report, as ``sluice aggregates adopt`` prints it."""
        kind = self.aggregate
        if self.ids:
            said = [f"{kind}: adopted {self.ids} ids, {self.events} events given versions"]
        else:
            said = [f"{kind}: nothing to adopt (every id with events already has versions)"]
        if self.left_events:
            shown = ", ".join(self.examples) + (
                ", ..." if self.left_ids > len(self.examples) else ""
            )
            said.append(
                f"{kind}: {self.left_events} events of {self.left_ids} ids that already have"
                f" versions have none themselves, left as they are ({shown})"
            )
        if self.without_id:
            said.append(
                f"{kind}: {self.without_id} events have no {AGGREGATES[kind]!r} in their"
                " payload, left as they are"
            )
        return said


async def adopt_history(store: Store, aggregate: str) -> Adoption:
    """Give every id of ``aggregate`` without version rows the versions 1..n of its
    events, in ``seq`` order (docs/concepts/aggregates.md, "Adopting an existing
    history"); ``AdoptionRefused`` for an unknown aggregate type, one the archive holds
    events of, or one an aggregate saved meanwhile (run it again)."""
    key = AGGREGATES.get(aggregate)
    if key is None:
        raise AdoptionRefused(
            f"{aggregate!r} is not an aggregate type; known: {', '.join(sorted(AGGREGATES))}"
        )
    await _refuse_archived(store, aggregate)
    history: dict[str, list[str]] = {}
    without_id = 0
    rows = await store.fetchall(
        f"SELECT event_id, {store.dialect.payload_field(key)} FROM events"
        " WHERE aggregate = ? ORDER BY seq",
        (aggregate,),
    )
    for event_id, ident in rows:
        if ident is None:
            without_id += 1
        else:
            history.setdefault(str(ident), []).append(str(event_id))
    versioned: dict[str, set[str]] = {}
    for ident, event_id in await store.fetchall(
        "SELECT aggregate_id, event_id FROM aggregate_events WHERE aggregate = ?", (aggregate,)
    ):
        versioned.setdefault(str(ident), set()).add(str(event_id))
    left = {
        ident: sum(1 for e in events if e not in versioned[ident])
        for ident, events in history.items()
        if ident in versioned
    }
    left = {ident: n for ident, n in sorted(left.items()) if n}
    adopted = [ident for ident in history if ident not in versioned]
    chunk: list[tuple[str, str, int, str]] = []
    for n, ident in enumerate(adopted, start=1):
        chunk += [(aggregate, ident, v, e) for v, e in enumerate(history[ident], start=1)]
        if len(chunk) >= CHUNK_ROWS or n == len(adopted):
            await _insert(store, aggregate, chunk)
            chunk = []
    return Adoption(
        aggregate,
        ids=len(adopted),
        events=sum(len(history[ident]) for ident in adopted),
        left_ids=len(left),
        left_events=sum(left.values()),
        examples=tuple(list(left)[:EXAMPLES]),
        without_id=without_id,
    )


async def _insert(store: Store, aggregate: str, rows: Sequence[tuple[str, str, int, str]]) -> None:
    """One chunk's version rows, in one transaction: all of them or none."""
    async with store.transaction() as tx:
        await tx.serialize(archive_lock(aggregate))
        await _refuse_archived(tx, aggregate)
        inserted = await tx.insert_new("aggregate_events", _COLUMNS, rows, "event_id")
        if len(inserted) != len(rows):  # raising rolls the chunk back
            raise AdoptionRefused(
                f"an aggregate of {aggregate} was saved while its history was being adopted;"
                " the ids adopted so far keep their versions: run the adoption again"
            )


async def _refuse_archived(db: Store | Tx, aggregate: str) -> None:
    row = await db.fetchone(
        "SELECT COUNT(*), COALESCE(SUM(events), 0), MIN(first_seq), MAX(last_seq)"
        " FROM history_segments WHERE aggregate = ?",
        (aggregate,),
    )
    if row is None or not row[0]:
        return
    segments, events, first, last = (int(value) for value in row)
    raise AdoptionRefused(
        f"the archive holds {events} events of {aggregate} (seq {first} to {last}, in"
        f" {segments} segments of the history_segments table, moved there by the"
        " archive-history task): loads read the events table only, so the aggregates they"
        " belong to would fold without them. Nothing was adopted. sluice cannot move"
        " archived events back into the table; see docs/concepts/aggregates.md"
        " (Adopting an existing history)"
    )


__all__ = ["Adoption", "AdoptionRefused", "adopt_history"]
