"""``sluice replay``: rebuild a projection from the event history, then swap it in.

The rebuild writes fresh tables (suffixed) while the live tables keep serving
and the live worker keeps updating them. Near the head of the history it takes
the write lock, applies the last events, drops the old tables, renames the new
ones into place and sets the projection's watermark to the head, all in one
transaction. Live deliveries at or below the watermark are then skipped as
already applied, so nothing is counted twice or missed.

For speed (docs/benchmarks.md: 300k events/s on SQLite), the bulk of the history is read in
large chunks of ``(seq, payload)`` only (for a projection that takes payloads, each
chunk as one JSON array the database joins: ``sluice.history.packed``), by seq
whatever the planner statistics say, the read of the next chunk overlapping the
apply of the last, and plain indexes of the new tables are built once after the
bulk instead of being updated row by row.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from tqdm import tqdm

from sluice.config import Config
from sluice.events import Event, decode
from sluice.history import catalog
from sluice.history.packed import Packed, read_history_packed, read_table
from sluice.history.reader import read_history
from sluice.process.resources import Resources
from sluice.projections.base import EngineProjection
from sluice.store import Tx
from sluice.store.base import HEAD, Row

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RebuildResult:
    projection: str
    events: int
    watermark: int


# Events per read; apply runs once per read, so a bigger read sums more views per row written.
CHUNK = 50_000
# The rebuild finishes under the write lock once a read returns fewer events than this.
TAIL = 10_000


async def _count(resources: Resources, projection: EngineProjection) -> int:
    types = projection.event_types
    row = await resources.store.fetchone(
        f"SELECT COUNT(*) FROM events WHERE type IN ({', '.join('?' * len(types))})", types
    )
    return (int(row[0]) if row else 0) + await catalog.count(resources.store, types)


def _select(tx: Tx, projection: EngineProjection) -> str:
    # Only what apply needs: the payload, and seq for the position.
    types = ", ".join("?" * len(projection.event_types))
    return (
        f"SELECT seq, payload FROM {tx.dialect.events_by_seq}"
        f" WHERE seq > ? AND type IN ({types}) ORDER BY seq LIMIT ?"
    )


# A chunk of the history: rows of (seq, payload), or packed for a projection that
# takes payloads (its apply does not depend on their order within a chunk).
Chunk = Packed | Sequence[Row]


def _extent(chunk: Chunk) -> tuple[int, int]:
    """The highest seq of a non-empty chunk and how many events it holds."""
    if isinstance(chunk, Packed):
        return chunk.last, chunk.count
    return chunk[-1][0], len(chunk)


async def _read_table(tx: Tx, projection: EngineProjection, after: int, limit: int) -> Chunk | None:
    if projection.apply_payloads is not None:
        packed = await read_table(tx.fetchone, tx.dialect, projection.event_types, after, limit)
        return packed if packed.count else None
    rows = await tx.fetchall(_select(tx, projection), (after, *projection.event_types, limit))
    return rows or None


def _decode_all(rows: Sequence[Row]) -> list[Event]:
    return [decode(payload) for _, payload in rows]


async def _apply(
    tx: Tx, projection: EngineProjection, chunk: Chunk, suffix: str, config: Config
) -> None:
    if isinstance(chunk, Packed):
        assert projection.apply_payloads is not None
        await projection.apply_payloads(chunk.payloads, tx, suffix, config)
    else:
        await projection.apply(_decode_all(chunk), tx, suffix, config)


async def rebuild(
    resources: Resources,
    projection: EngineProjection,
    *,
    chunk: int = CHUNK,
    tail: int = TAIL,
    progress: bool = True,
) -> RebuildResult:
    """Rebuild ``projection`` into fresh tables and swap them in atomically."""
    store = resources.store
    suffix = f"__r{secrets.token_hex(4)}"
    tables, indexes = _split_ddl(projection.ddl.format(s=suffix))
    async with store.transaction() as tx:
        await tx.execute_script(tables)
    await store.refresh_statistics("events")
    total = await _count(resources, projection) if progress else None
    bar = tqdm(total=total, unit="ev", disable=not progress)
    try:
        position, applied = await _bulk(resources, projection, suffix, chunk, min(tail, chunk), bar)
        if indexes:
            async with store.transaction() as tx:
                # Built once over the bulk of the rows rather than kept up to date row by row.
                await tx.execute_script(indexes)
        async with store.transaction() as tx:
            await tx.lock_history()  # no event commits from here to the swap
            while found := await _read_table(tx, projection, position, chunk):
                await _apply(tx, projection, found, suffix, resources.config)
                position, count = _extent(found)
                applied += count
                bar.total = max(bar.total or 0, applied)
                bar.update(count)
            watermark = await _swap(tx, projection, suffix)
    except BaseException:
        await _drop(resources, projection, suffix)
        raise
    finally:
        bar.close()
    if projection.republish is not None:
        await projection.republish(resources)
    log.info("replay: swapped in", projection=projection.name, events=applied, watermark=watermark)
    return RebuildResult(projection.name, applied, watermark)


async def _bulk(
    resources: Resources,
    projection: EngineProjection,
    suffix: str,
    chunk: int,
    tail: int,
    bar: tqdm[Any],
) -> tuple[int, int]:
    """Apply reads of ``chunk`` events (archived, then hot) until a read of the table
    returns fewer than ``tail``; each read of the next chunk (the reader connection)
    overlaps the apply of the last one."""
    store, config, types = resources.store, resources.config, projection.event_types
    position, applied = 0, 0
    # Archived events first (and the hot rows among them), then the table on.
    history: AsyncGenerator[Chunk] = (
        read_history_packed(store, types, chunk=chunk, short=tail)
        if projection.apply_payloads is not None
        else read_history(store, types, chunk=chunk, short=tail)
    )
    pending = asyncio.ensure_future(_next(history))
    try:
        while (found := await pending) is not None:
            pending = asyncio.ensure_future(_next(history))
            last, count = _extent(found)
            if count:
                async with store.transaction() as tx:
                    await _apply(tx, projection, found, suffix, config)
                position, applied = last, applied + count
                bar.update(count)
    finally:
        pending.cancel()  # after a failure: the read in flight is not wanted
        await asyncio.gather(pending, return_exceptions=True)
        await history.aclose()
    return position, applied


async def _next(chunks: AsyncIterator[Chunk]) -> Chunk | None:
    return await anext(chunks, None)


def _split_ddl(ddl: str) -> tuple[str, str]:
    """The statements creating tables, and those creating plain (non-unique) indexes.

    Unique indexes stay with the tables: an upsert may name them as its conflict target.
    """
    statements = [s.strip() for s in ddl.split(";") if s.strip()]
    indexes = [s for s in statements if s.upper().startswith("CREATE INDEX")]
    tables = [s for s in statements if s not in indexes]
    return ";\n".join(tables), ";\n".join(indexes)


async def _swap(tx: Tx, projection: EngineProjection, suffix: str) -> int:
    """Set the watermark to the head, then put the new tables in place of the old (all
    but the processed table, which stays).

    The caller holds the history lock and has applied every event up to the
    head. The watermark row is written first: it waits for live batches that
    read it (they finish in the old tables, and their events are in the
    rebuild), and later ones wait for this commit and then read the new value.
    """
    row = await tx.fetchone(HEAD)  # archived events count too
    head = int(row[0]) if row else 0
    await tx.execute(
        "INSERT INTO positions (name, seq) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq",
        (projection.watermark, head),
    )
    for table in projection.tables:
        if table == projection.processed_table:
            # Kept: its rows stay true of the new tables (every event at or below the
            # watermark is in them), and they name the batches of the deliveries
            # recorded so far (sluice.records.delivery_batches).
            await tx.execute(f"DROP TABLE {table}{suffix}")
            continue
        await tx.execute(f"DROP TABLE {table}")
        await tx.execute(f"ALTER TABLE {table}{suffix} RENAME TO {table}")
    return head


async def _drop(resources: Resources, projection: EngineProjection, suffix: str) -> None:
    async with resources.store.transaction() as tx:
        for table in projection.tables:
            await tx.execute(f"DROP TABLE IF EXISTS {table}{suffix}")
