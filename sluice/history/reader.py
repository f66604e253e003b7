"""One history for readers: archived segments and the hot ``events`` table, in seq order.

Segments of one aggregate never overlap each other nor that aggregate's rows left in
the table, but segments of different aggregates interleave, and a hot row of one
aggregate may sit below an archived row of another. So a reader goes through windows
of seq numbers: each window reaches the end of a group of the segments it needs
(those whose ranges overlap), and holds the rows of those segments merged with the
hot rows of the same window; past the last segment it reads the table alone. At
most one window's segments are decoded at a time (one segment when the types asked
for are one aggregate's, as every projection's and export's are).

A segment that fails its checks raises ``CorruptSegment`` naming it: never skipped.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from sluice.history import catalog
from sluice.history.catalog import SegmentRef
from sluice.history.segment import EventRow
from sluice.store.base import Row, Store

# Rows per chunk handed to the caller, and per read of the hot table.
CHUNK = 50_000


def _hot_sql(store: Store, types: Sequence[str], *, bounded: bool) -> str:
    marks = ", ".join("?" * len(types))
    upper = " AND seq <= ?" if bounded else ""
    return (
        f"SELECT seq, payload FROM {store.dialect.events_by_seq}"
        f" WHERE seq > ?{upper} AND type IN ({marks})"
        " ORDER BY seq LIMIT ?"
    )


def windows(segments: Sequence[SegmentRef]) -> list[tuple[list[SegmentRef], int]]:
    """The segments in groups whose seq ranges overlap, each with its highest seq."""
    groups: list[tuple[list[SegmentRef], int]] = []
    for segment in segments:  # in first_seq order
        if groups and segment.first_seq <= groups[-1][1]:
            group, end = groups[-1]
            groups[-1] = ([*group, segment], max(end, segment.last_seq))
        else:
            groups.append(([segment], segment.last_seq))
    return groups


async def read_history(
    store: Store,
    types: Sequence[str],
    after: int = 0,
    *,
    upto: int | None = None,
    chunk: int = CHUNK,
    short: int | None = None,
) -> AsyncGenerator[list[tuple[int, bytes]]]:
    """``(seq, payload)`` of every event of ``types`` with ``after < seq <= upto`` (no
    upper bound when None), archived or hot, in seq order and in chunks of at most
    ``chunk``; past the segments, ends after a read of the table returns fewer than
    ``short`` rows (``chunk`` by default; ``sluice replay`` finishes the rest under a lock).

    An archive run may move rows while this reads: after each window the segments are
    listed again, and a window a new segment reaches into is read again before any
    of it is handed out, so a row is never skipped nor given twice.
    """
    position, short = after, min(chunk, chunk if short is None else short)
    while upto is None or position < upto:
        group, end = await _next_window(store, types, position, upto)
        window = (position, end, upto)
        rows, covered, last = await _window(store, types, window, group, chunk, short)
        if await moved_under_us(store, types, position, covered, group):
            continue
        for start in range(0, len(rows), chunk):
            yield rows[start : start + chunk]
        if last or covered is None:
            return
        position = covered


async def _next_window(
    store: Store, types: Sequence[str], position: int, upto: int | None
) -> tuple[list[SegmentRef], int | None]:
    listed = [
        s
        for s in await catalog.segments(store, after=position, types=types)
        if upto is None or s.first_seq <= upto
    ]
    if not listed:
        return [], None
    group, end = windows(listed)[0]
    return group, end if upto is None else min(end, upto)


async def _window(
    store: Store,
    types: Sequence[str],
    window: tuple[int, int | None, int | None],
    group: list[SegmentRef],
    chunk: int,
    short: int,
) -> tuple[list[tuple[int, bytes]], int | None, bool]:
    """The rows of one window (after ``position``, up to ``end`` when segments are read,
    else a read of the table), the highest seq it covers (None: no bound) and whether it
    is the last one."""
    position, end, upto = window
    if end is not None:

        def select(rows: list[EventRow]) -> list[tuple[int, bytes]]:
            return [(r[0], r[4]) for r in rows if position < r[0] <= end and r[2] in types]

        parts = [await catalog.load_selected(store, s, select) for s in group]
        parts = [p for p in (*parts, await _hot_between(store, types, position, end, chunk)) if p]
        merged = parts[0] if len(parts) == 1 else list(heapq.merge(*parts))
        return merged, end, end == upto
    bounded = upto is not None
    params = (position, upto, *types, chunk) if bounded else (position, *types, chunk)
    # (seq, payload) as both stores return them: int and bytes, no copy per row.
    rows: list[Any] = await store.fetchall(_hot_sql(store, types, bounded=bounded), params)
    if rows and len(rows) >= short:
        return rows, rows[-1][0], False
    return rows, upto, True


async def moved_under_us(
    store: Store,
    types: Sequence[str],
    position: int,
    covered: int | None,
    group: Sequence[SegmentRef] = (),
) -> bool:
    """Whether a segment not in ``group`` now holds events of the window just read (after
    ``position``, up to ``covered``; None: no bound)."""
    known = {s.id for s in group}
    return any(
        s.id not in known and (covered is None or s.first_seq <= covered)
        for s in await catalog.segments(store, after=position, types=types)
    )


async def _hot_between(
    store: Store, types: Sequence[str], after: int, upto: int, chunk: int
) -> list[tuple[int, bytes]]:
    rows: list[Row] = []
    sql = _hot_sql(store, types, bounded=True)
    while True:
        found = await store.fetchall(sql, (after, upto, *types, chunk))
        rows.extend(found)
        if len(found) < chunk:
            return [(int(seq), bytes(payload)) for seq, payload in rows]
        after = int(found[-1][0])


async def archived_end(store: Store, types: Sequence[str], after: int = 0) -> int:
    """The highest seq of a segment holding events of ``types``, or ``after`` if none does."""
    found = await catalog.segments(store, after=after, types=types)
    return max((s.last_seq for s in found), default=after)
