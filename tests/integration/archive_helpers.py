"""Helpers for the archive tests: events made old, and the whole history read back."""

from __future__ import annotations

from datetime import timedelta

from sluice.builtin.links.events import LinkVisited
from sluice.events import utcnow
from sluice.history import archive, catalog
from sluice.history.segment import EventRow
from sluice.relay.relay import POSITION
from sluice.store import Store
from sluice.store.base import Row

# Before any hot window: what "created long ago" looks like in events.created_at.
LONG_AGO = "2026-01-01T00:00:00+00:00"
COLUMNS = "seq, event_id, type, aggregate, payload, trace_id, created_at"


def as_row(row: Row) -> EventRow:
    seq, event_id, type_, aggregate, payload, trace_id, created_at = row
    return (
        int(seq),
        str(event_id),
        str(type_),
        str(aggregate),
        bytes(payload),
        str(trace_id),
        str(created_at),
    )


async def hot_rows(store: Store) -> list[EventRow]:
    return [as_row(r) for r in await store.fetchall(f"SELECT {COLUMNS} FROM events ORDER BY seq")]


async def archived_rows(store: Store) -> list[EventRow]:
    rows: list[EventRow] = []
    for segment in await catalog.segments(store):
        rows.extend(await catalog.load(store, segment))
    return rows


async def make_old(store: Store, upto: int) -> None:
    """Every event up to ``upto`` created long before any hot window."""
    async with store.transaction() as tx:
        await tx.execute("UPDATE events SET created_at = ? WHERE seq <= ?", (LONG_AGO, upto))


async def all_made_old(store: Store) -> int:
    """One more event of another aggregate (the head stays hot), and every event before it
    made old: the head's seq, which the relay is taken to have published."""
    async with store.transaction() as tx:
        await tx.append(LinkVisited(code="c", visitor="newest"))
    head = await store.fetchone("SELECT MAX(seq) FROM events")
    assert head is not None
    await make_old(store, int(head[0]))
    return int(head[0])


async def assert_each_once(store: Store, before: list[EventRow]) -> list[EventRow]:
    """Every row of ``before`` is in the table or in a segment, exactly once; the
    archived rows."""
    archived = await archived_rows(store)
    hot = await hot_rows(store)
    assert sorted(archived + hot) == sorted(before)
    assert not {r[0] for r in archived} & {r[0] for r in hot}
    return archived


async def run_archive(
    store: Store,
    *,
    segment_events: int,
    min_events: int = 1,
    published: int | None = None,
    days_ahead: int = 0,
) -> list[archive.Moved]:
    """One archive run with a 7-day hot window, ``days_ahead`` days from now."""
    position = await store.position(POSITION) if published is None else published
    bounds = await archive.limits(
        store,
        utcnow() + timedelta(days=days_ahead),
        7,
        position,
        segment_events=segment_events,
        min_events=min_events,
    )
    return await archive.archive(store, bounds)
