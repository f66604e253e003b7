"""The CSV of a job, kept in the database as consecutive byte chunks.

Processes on other hosts share only the database, so the result lives there:
``export_chunks`` holds rows of at most ``CHUNK_BYTES``, keyed by the job and
the offset of their first byte. Chunks are written in the transaction that
stores the checkpoint counting them (``jobs.checkpoint``), so the stored bytes
always end exactly where the checkpoint says. A download reads one chunk per
query, so neither side holds more than a chunk of a result in memory.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from sluice.app import Store, Tx

# Big enough that a download of a large export takes few queries, small enough that
# a chunk is nothing to hold in memory; a window's lines beyond it take more rows.
CHUNK_BYTES = 256 * 1024

_AT = "SELECT first_byte, data FROM export_chunks WHERE job_id = ? AND first_byte = ?"
_COVERING = (
    "SELECT first_byte, data FROM export_chunks WHERE job_id = ? AND first_byte <= ?"
    " ORDER BY first_byte DESC LIMIT 1"
)


class ResultMissing(Exception):
    """Bytes of a result are not in the database (purged while being read)."""


async def append(tx: Tx, job_id: str, at: int, data: bytes) -> None:
    """Store ``data`` as the bytes from offset ``at`` on."""
    rows = [
        (job_id, at + start, data[start : start + CHUNK_BYTES])
        for start in range(0, len(data), CHUNK_BYTES)
    ]
    if rows:
        await tx.executemany(
            "INSERT INTO export_chunks (job_id, first_byte, data) VALUES (?, ?, ?)", rows
        )


async def cut_at(tx: Tx, job_id: str, size: int) -> bool:
    """Drop the bytes from ``size`` on; whether the first ``size`` bytes are all stored."""
    await tx.execute(
        "DELETE FROM export_chunks WHERE job_id = ? AND first_byte >= ?", (job_id, size)
    )
    if size == 0:
        return True
    # Chunks only ever go away all together (a purge), so the last one tells.
    last = await tx.fetchone(_COVERING, (job_id, size - 1))
    return last is not None and int(last[0]) + len(last[1]) == size


async def delete(tx: Tx, job_id: str) -> None:
    await tx.execute("DELETE FROM export_chunks WHERE job_id = ?", (job_id,))


async def read(store: Store, job_id: str, start: int, stop: int) -> AsyncGenerator[memoryview]:
    """Bytes ``start`` to ``stop - 1`` of the result, a chunk (or part of one) at a time.

    Raises ``ResultMissing`` when a chunk is not there.
    """
    if start >= stop:
        return
    row = await store.fetchone(_COVERING, (job_id, start))
    while True:
        if row is None:
            raise ResultMissing(f"export {job_id}: no chunk holds byte {start}")
        first, data = int(row[0]), memoryview(row[1])
        end = first + len(data)
        if end <= start:
            raise ResultMissing(f"export {job_id}: no chunk holds byte {start}")
        yield data[start - first : min(end, stop) - first]
        if end >= stop:
            return
        start = end
        row = await store.fetchone(_AT, (job_id, end))
