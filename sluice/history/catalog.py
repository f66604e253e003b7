"""The segments a store holds (table ``history_segments``, migration 14): their index
rows, the head of the archived history, and a segment's rows, checked.

A segment row is written once, by the archive, in the transaction that deletes its
events from the hot table, and never changed: whatever the index row says about a
segment (seqs, types, counts) was read from the segment's own header when it was made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from sluice.history.errors import CorruptSegment, UnsupportedSegmentVersion
from sluice.history.segment import EventRow, decode
from sluice.store.base import HEAD, Store

T = TypeVar("T")

_types_decoder = msgspec.json.Decoder(dict[str, int])

# The highest seq of the whole history, hot or archived (the archive never moves the
# newest event, but a reader must not depend on it).
HEAD_SQL = HEAD


class SegmentRef(msgspec.Struct, frozen=True):
    """A segment's index row: what a reader needs before it loads the segment."""

    id: int
    aggregate: str
    first_seq: int
    last_seq: int
    types: dict[str, int]

    def holds_any(self, types: Sequence[str]) -> bool:
        """Whether the segment holds an event of one of ``types``."""
        return any(t in self.types for t in types)


async def segments(store: Store, *, after: int = 0, types: Sequence[str] = ()) -> list[SegmentRef]:
    """Segments holding events above ``after`` (of one of ``types``, if given), in
    ``first_seq`` order. The index is small (a row per 100,000 events), so it is read whole."""
    rows = await store.fetchall(
        "SELECT id, aggregate, first_seq, last_seq, types FROM history_segments"
        " WHERE last_seq > ? ORDER BY first_seq",
        (after,),
    )
    found = [
        SegmentRef(int(i), str(a), int(f), int(last), _types_decoder.decode(t))
        for i, a, f, last, t in rows
    ]
    return [s for s in found if not types or s.holds_any(types)]


async def load(store: Store, segment: SegmentRef) -> list[EventRow]:
    """The segment's rows, every checksum passed; ``CorruptSegment`` names the segment."""
    return await load_selected(store, segment, list)


async def load_selected(
    store: Store, segment: SegmentRef, select: Callable[[list[EventRow]], list[T]]
) -> list[T]:
    """``select`` of the segment's rows, checked as by ``load``. Decoding and ``select``
    run in a thread: a reader's next segment decodes while its caller applies the last."""
    row = await store.fetchone("SELECT data FROM history_segments WHERE id = ?", (segment.id,))
    if row is None:
        raise CorruptSegment(f"history segment {segment.id} is listed but has no data")
    return await asyncio.to_thread(_decoded, segment, bytes(row[0]), select)


def _decoded(
    segment: SegmentRef, data: bytes, select: Callable[[list[EventRow]], list[T]]
) -> list[T]:
    try:
        rows = decode(data)
    except CorruptSegment as exc:
        where = f"{segment.aggregate}, seq {segment.first_seq}-{segment.last_seq}"
        raise CorruptSegment(f"history segment {segment.id} ({where}): {exc}") from exc
    except UnsupportedSegmentVersion as exc:
        exc.add_note(f"history segment {segment.id}")
        raise
    if (rows[0][0], rows[-1][0]) != (segment.first_seq, segment.last_seq):
        raise CorruptSegment(f"history segment {segment.id}: its rows do not match its index row")
    return select(rows)


async def count(store: Store, types: Sequence[str]) -> int:
    """How many events of ``types`` the segments hold (from the index, no segment read)."""
    return sum(s.types.get(t, 0) for s in await segments(store, types=types) for t in types)


async def head(store: Store) -> int:
    """The highest seq of the whole history, hot or archived."""
    row = await store.fetchone(HEAD_SQL)
    return int(row[0]) if row else 0
