"""copy-store reads a table of large rows (history segments, export chunks) a few rows at
a time, and a table of small rows in full batches, without knowing which is which."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.store.copy import BATCH, BATCH_BYTES, Table, _batches

SEGMENT = b"s" * (5 << 20)  # one shared object: 5 MB per row, not per test's memory


class Source:
    """A table of ``rows`` rows (id, data) whose data is ``row_bytes`` long; records the
    bytes each read returned."""

    def __init__(self, rows: int, data: bytes) -> None:
        self.rows = [(i, data) for i in range(1, rows + 1)]
        self.reads: list[int] = []

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        *after, limit = params
        start = int(after[0]) if after else 0
        found = self.rows[start : start + int(limit)]
        self.reads.append(sum(len(data) for _, data in found))
        return found


async def read_all(source: Source) -> int:
    table = Table("history_segments", ("id", "data"), ("id",))
    seen = 0
    async for rows in _batches(source, table, BATCH):  # type: ignore[arg-type]
        seen += len(rows)
    return seen


async def test_large_rows_are_read_at_most_a_batchs_bytes_at_a_time() -> None:
    source = Source(40, SEGMENT)
    assert await read_all(source) == 40
    assert max(source.reads) <= BATCH_BYTES
    assert len(source.reads) <= 40 // (BATCH_BYTES // len(SEGMENT)) + 2


async def test_small_rows_ramp_up_to_full_batches() -> None:
    source = Source(50_000, b"v" * 60)
    assert await read_all(source) == 50_000
    full = BATCH * 60
    assert source.reads.count(full) >= 3  # after a few probing reads, batches of BATCH
    assert len(source.reads) <= 10
