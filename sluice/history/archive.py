"""Moving old, published events from the hot ``events`` table into segments.

An event is archived once it is (a) older than ``SLUICE_HISTORY_HOT_DAYS``, (b)
published by the relay (``seq`` at or below its position), (c) not the newest
event of the table and (d) acked by every group on its stream (a projection or
handler that stalled keeps its unfinished events hot, whatever their age). Each
segment holds one aggregate's events, consecutive in that aggregate, at most
``SLUICE_HISTORY_SEGMENT_EVENTS`` of them; it is encoded, decoded again and compared
with the rows read, and then ONE transaction inserts it and deletes exactly those rows
(by aggregate and seq range, the count checked). A process killed at any point
therefore leaves each event either in the table or in a segment, never in both and
never in neither.

(c) keeps the head of the history in the table, so that ``copy-store`` (which
moves PostgreSQL's identity past the largest ``events.seq`` it copied) never hands
out a number a segment already holds.

An aggregate type that event-sourced aggregates save (``sluice.app.Aggregate``: it has
rows in ``aggregate_events``) is not archived at all: its events are the state of
those aggregates, read back by every load, so they stay in the table while the
aggregates live (a snapshot shortens a load, it does not replace the history). A type
whose history is being adopted meanwhile is checked again under its lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from sluice.events import AGGREGATES
from sluice.history.segment import EventRow, decode, encode, read_info
from sluice.store.base import Store, Tx

# Events per segment, at most: about 5 MB of segment for 100,000 visits (49.8 bytes
# each, bench/history.py), decoded in a third of a second; a reader holds one at a time.
SEGMENT_EVENTS = 100_000
# A segment is made only from this many events or more: each hourly run would otherwise
# write a small, poorly compressed segment per aggregate. The table so keeps at most
# this many archivable events per aggregate beyond the hot window.
MIN_SEGMENT_EVENTS = 10_000

_COLUMNS = "seq, event_id, type, aggregate, payload, trace_id, created_at"


class ArchiveError(Exception):
    """The events to archive changed under the archive (another run?); nothing moved."""


@dataclass(frozen=True)
class Moved:
    """One segment written: its id, aggregate, seq range and size."""

    segment_id: int
    aggregate: str
    first_seq: int
    last_seq: int
    events: int
    bytes: int


@dataclass(frozen=True)
class Limits:
    """What may be archived: events created before ``before`` (db text, as
    ``events.created_at``) with ``seq <= upto`` and, for an aggregate in ``passed``,
    ``seq <= passed[aggregate]``."""

    before: str
    upto: int
    passed: Mapping[str, int] = field(default_factory=dict)
    segment_events: int = SEGMENT_EVENTS
    min_events: int = MIN_SEGMENT_EVENTS


async def limits(
    store: Store,
    now: datetime,
    hot_days: int,
    published: int,
    passed: Mapping[str, int] | None = None,
    **sizes: int,
) -> Limits:
    """The limits of a run at ``now`` with the relay at ``published`` and the groups at
    ``passed`` (``streams.maintenance.passed_by_every_group``)."""
    row = await store.fetchone("SELECT COALESCE(MIN(seq), 1), COALESCE(MAX(seq), 0) FROM events")
    oldest, newest = (int(row[0]), int(row[1])) if row else (1, 0)
    before = (now - timedelta(days=hot_days)).isoformat()
    young = await _first_young(store, oldest, newest, before)
    upto = min(published, newest - 1, young - 1)
    return Limits(before=before, upto=upto, passed=dict(passed or {}), **sizes)


async def _first_young(store: Store, low: int, high: int, before: str) -> int:
    """About the first seq created at or after ``before``, found by bisection on the key:
    no index on ``created_at``, and the scans by aggregate stop there instead of walking
    the hot window. Only a bound: each row's own time is checked before it moves."""
    high += 1
    while low < high:
        middle = (low + high) // 2
        row = await store.fetchone(
            "SELECT seq, created_at FROM events WHERE seq >= ? ORDER BY seq LIMIT 1", (middle,)
        )
        if row is None or str(row[1]) >= before:
            high = middle
        else:
            low = int(row[0]) + 1
    return low


async def archive(
    store: Store,
    limits: Limits,
    *,
    after_segment: Callable[[Moved], Awaitable[None]] | None = None,
) -> list[Moved]:
    """Archive every aggregate's archivable events; the segments written, in order.

    ``after_segment`` runs after each segment's commit (a task's checkpoint: it may
    raise to stop the run, which leaves every event exactly once).
    """
    moved: list[Moved] = []
    for aggregate in sorted(AGGREGATES):
        if await _event_sourced(store, aggregate):
            continue
        while (rows := await _next_rows(store, aggregate, limits)) is not None:
            done = await _move(store, rows)
            moved.append(done)
            if after_segment is not None:
                await after_segment(done)
    return moved


def archive_lock(aggregate: str) -> str:
    """The lock (``Tx.serialize``) of moving ``aggregate``'s events into segments."""
    return f"archive:{aggregate}"


async def _event_sourced(store: Store | Tx, aggregate: str) -> bool:
    """Whether an event-sourced aggregate saved events of ``aggregate`` (a key lookup)."""
    row = await store.fetchone(
        "SELECT 1 FROM aggregate_events WHERE aggregate = ? LIMIT 1", (aggregate,)
    )
    return row is not None


async def _next_rows(store: Store, aggregate: str, limits: Limits) -> list[EventRow] | None:
    """The aggregate's oldest events, up to the first one that may not be archived; None
    when they are fewer than a segment's minimum."""
    upto = min(limits.upto, limits.passed.get(aggregate, limits.upto))
    found = await store.fetchall(
        f"SELECT {_COLUMNS} FROM events WHERE aggregate = ? AND seq <= ? ORDER BY seq LIMIT ?",
        (aggregate, upto, limits.segment_events),
    )
    rows: list[EventRow] = []
    for seq, event_id, type_, agg, payload, trace_id, created_at in found:
        if str(created_at) >= limits.before:
            break  # clocks may step back: stop at the first young one, never skip it
        rows.append(
            (
                int(seq),
                str(event_id),
                str(type_),
                str(agg),
                bytes(payload),
                str(trace_id),
                str(created_at),
            )
        )
    return rows if rows and len(rows) >= limits.min_events else None


async def _move(store: Store, rows: Sequence[EventRow]) -> Moved:
    data = encode(rows)
    if decode(data) != list(rows):  # never delete what the segment would not give back
        raise ArchiveError(f"segment of seq {rows[0][0]}-{rows[-1][0]} does not round-trip")
    info = read_info(data)
    aggregate = rows[0][3]
    async with store.transaction() as tx:
        # Adopting the type's history (sluice.app.adoption) takes the same lock: either
        # it sees this segment and refuses, or this sees its versions and moves nothing.
        await tx.serialize(archive_lock(aggregate))
        if await _event_sourced(tx, aggregate):
            raise ArchiveError(f"{aggregate} became event-sourced during the run; nothing moved")
        inserted = await tx.fetchone(
            "INSERT INTO history_segments (aggregate, first_seq, last_seq, first_at, last_at,"
            " events, types, bytes, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                aggregate,
                info.first_seq,
                info.last_seq,
                info.first_created_at,
                info.last_created_at,
                info.count,
                msgspec.json.encode(info.types).decode(),
                len(data),
                data,
            ),
        )
        deleted = await tx.execute(
            "DELETE FROM events WHERE aggregate = ? AND seq >= ? AND seq <= ?",
            (aggregate, info.first_seq, info.last_seq),
        )
        if deleted != len(rows):  # raising rolls the insert back with the delete
            raise ArchiveError(
                f"{aggregate} seq {info.first_seq}-{info.last_seq}: {deleted} rows to delete,"
                f" {len(rows)} encoded"
            )
    assert inserted is not None
    return Moved(int(inserted[0]), aggregate, info.first_seq, info.last_seq, info.count, len(data))
