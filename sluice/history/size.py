"""How big the event history is: the hot table and the archive segments.

Read by ``sluice status``, ``GET /v1/admin/archive``, ``/admin`` and ``/metrics``
at every call, so every figure comes from an index or the small segment index,
never from a scan of the events table:

- ``hot_events`` is the seq span of the table (its first and last seq, two index
  probes) less the archived events inside that span. The archive moves each
  aggregate's oldest events, so segments of one aggregate may lie above the
  table's first seq; a segment that straddles it counts in proportion to its seq
  range. Exact while seq numbers have no gaps (SQLite hands them out densely); on
  PostgreSQL a rolled-back append leaves a gap in the sequence, counted here as
  an event.
- Archived figures are sums over the segment index rows.
"""

from __future__ import annotations

import msgspec

from sluice.store.base import Store


class HistorySize(msgspec.Struct, frozen=True):
    """The history's size at one moment (see the module's notes on ``hot_events``)."""

    hot_events: int
    hot_oldest_at: str | None
    segments: int
    archived_events: int
    archived_bytes: int
    oldest_event_at: str | None
    head_seq: int


async def measure(store: Store) -> HistorySize:
    """The history's size now, from indexes only (no scan of the events table)."""
    row = await store.fetchone("SELECT MIN(seq), MAX(seq) FROM events")
    hot_oldest: str | None = None
    hot = last = 0
    if row is not None and row[0] is not None:
        first, last = int(row[0]), int(row[1])
        oldest = await store.fetchone("SELECT created_at FROM events WHERE seq = ?", (first,))
        hot_oldest = str(oldest[0]) if oldest else None
        inside = await store.fetchone(
            "SELECT COALESCE(SUM(CASE WHEN first_seq >= ? THEN events"
            " ELSE events * (last_seq - ? + 1) / (last_seq - first_seq + 1) END), 0)"
            " FROM history_segments WHERE last_seq >= ? AND first_seq <= ?",
            (first, first, first, last),
        )
        hot = max(0, last - first + 1 - int(inside[0] if inside else 0))
    archive = await store.fetchone(
        "SELECT COUNT(*), COALESCE(SUM(events), 0), COALESCE(SUM(bytes), 0), MIN(first_at),"
        " COALESCE(MAX(last_seq), 0) FROM history_segments"
    )
    segments, events, size, first_at, archived_head = archive or (0, 0, 0, None, 0)
    known = [str(t) for t in (first_at, hot_oldest) if t is not None]
    return HistorySize(
        hot_events=hot,
        hot_oldest_at=hot_oldest,
        segments=int(segments),
        archived_events=int(events),
        archived_bytes=int(size),
        oldest_event_at=min(known) if known else None,
        head_seq=max(last, int(archived_head)),
    )
