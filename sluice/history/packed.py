"""The history's payloads as one JSON array per chunk, for readers that only count.

``read_history`` hands out a ``(seq, payload)`` tuple per event; building a million
of them (in aiosqlite's thread, holding the GIL against the caller) was a quarter of
a replay's time. A reader whose work does not depend on the order of the events
within a chunk (``sluice replay`` of a projection that sums) can take each chunk of
the table as one row instead: the database joins the payloads into one JSON array
(``Dialect.json_array_agg``) and msgspec decodes it in one call. Archived events come
through ``read_history`` and are joined here; the table's rows are checked against
an archive run moving them meanwhile, as ``read_history`` does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.history.reader import archived_end, moved_under_us, read_history
from sluice.store.base import Dialect, Row, Store


@dataclass(frozen=True)
class Packed:
    """Events ``after < seq <= last`` of the types asked for: ``count`` of them, their
    payloads one JSON array (``b"[]"`` when none), in no guaranteed order."""

    after: int
    last: int
    count: int
    payloads: bytes | str


def _sql(dialect: Dialect, types: Sequence[str]) -> str:
    marks = ", ".join("?" * len(types))
    return (
        f"SELECT max(seq), count(*), {dialect.json_array_agg('payload')} FROM"
        f" (SELECT seq, payload FROM {dialect.events_by_seq} WHERE seq > ? AND type IN ({marks})"
        " ORDER BY seq LIMIT ?) AS chunk"
    )


def pack(after: int, rows: Sequence[tuple[int, bytes]]) -> Packed:
    """Rows as ``read_history`` hands them out, packed."""
    if not rows:
        return Packed(after, after, 0, b"[]")
    return Packed(after, rows[-1][0], len(rows), b"[" + b",".join(p for _, p in rows) + b"]")


async def read_table(
    fetchone: Callable[[str, Sequence[Any]], Awaitable[Row | None]],
    dialect: Dialect,
    types: Sequence[str],
    after: int,
    limit: int,
) -> Packed:
    """Up to ``limit`` events of ``types`` after ``after`` in the ``events`` table (through
    ``fetchone`` of a store or a transaction), packed by the database."""
    row = await fetchone(_sql(dialect, types), (after, *types, limit))
    if row is None or not row[1]:
        return Packed(after, after, 0, b"[]")
    return Packed(after, int(row[0]), int(row[1]), row[2])


async def read_history_packed(
    store: Store, types: Sequence[str], *, chunk: int, short: int
) -> AsyncGenerator[Packed]:
    """Every event of ``types``, archived or in the table, in chunks of at most ``chunk``
    in seq order (the events within a chunk in no order); ends after a read of the
    table returns fewer than ``short`` events."""
    position = 0
    while True:
        end = await archived_end(store, types, position)
        if end > position:
            async for rows in read_history(store, types, position, upto=end, chunk=chunk):
                yield pack(position, rows)
                position = rows[-1][0]
            position = end
        packed = await read_table(store.fetchone, store.dialect, types, position, chunk)
        if await moved_under_us(store, types, position, packed.last if packed.count else None):
            continue  # an archive run took rows of this read into a segment: read again
        if packed.count:
            yield packed
            position = packed.last
        if packed.count < short:
            return
