"""``sluice replay``: rebuild a projection from the event history, then swap it in.

The rebuild writes fresh tables (suffixed) while the live tables keep serving
and the live worker keeps updating them. Near the head of the history it takes
the write lock, applies the last events, drops the old tables, renames the new
ones into place and sets the projection's watermark to the head, all in one
transaction. Live deliveries at or below the watermark are then skipped as
already applied, so nothing is counted twice or missed.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from tqdm import tqdm

from sluice.events import AnyEvent, decode
from sluice.projections.base import Projection
from sluice.resources import Resources
from sluice.store import StoredEvent, Tx

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RebuildResult:
    projection: str
    events: int
    watermark: int


async def _count(resources: Resources, projection: Projection) -> int:
    types = projection.event_types
    row = await resources.store.fetchone(
        f"SELECT COUNT(*) FROM events WHERE type IN ({', '.join('?' * len(types))})", types
    )
    return int(row[0]) if row else 0


def _decode_all(events: Sequence[StoredEvent]) -> list[AnyEvent]:
    return [decode(e.payload) for e in events]


async def _tail(tx: Tx, projection: Projection, after: int, limit: int) -> list[StoredEvent]:
    types = projection.event_types
    rows = await tx.fetchall(
        "SELECT seq, event_id, type, aggregate, payload, trace_id, created_at FROM events"
        f" WHERE seq > ? AND type IN ({', '.join('?' * len(types))}) ORDER BY seq LIMIT ?",
        (after, *types, limit),
    )
    return [StoredEvent(*row) for row in rows]


async def rebuild(
    resources: Resources, projection: Projection, *, chunk: int = 10_000, progress: bool = True
) -> RebuildResult:
    """Rebuild ``projection`` into fresh tables and swap them in atomically."""
    store, config = resources.store, resources.config
    suffix = f"__r{secrets.token_hex(4)}"
    async with store.transaction() as tx:
        await tx.execute_script(projection.ddl.format(s=suffix))
    bar = tqdm(total=await _count(resources, projection), unit="ev", disable=not progress)
    position, applied = 0, 0
    try:
        while True:
            events = await store.events_after(position, chunk, types=projection.event_types)
            if len(events) < chunk:
                break  # close to the head: finish under the write lock
            async with store.transaction() as tx:
                await projection.apply(tx, _decode_all(events), suffix, config)
            position, applied = events[-1].seq, applied + len(events)
            bar.update(len(events))
        async with store.transaction() as tx:
            while events := await _tail(tx, projection, position, chunk):
                await projection.apply(tx, _decode_all(events), suffix, config)
                position, applied = events[-1].seq, applied + len(events)
                bar.total = max(bar.total or 0, applied)
                bar.update(len(events))
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


async def _swap(tx: Tx, projection: Projection, suffix: str) -> int:
    row = await tx.fetchone("SELECT COALESCE(MAX(seq), 0) FROM events")
    head = int(row[0]) if row else 0
    for table in projection.tables:
        await tx.execute(f"DROP TABLE {table}")
        await tx.execute(f"ALTER TABLE {table}{suffix} RENAME TO {table}")
    await tx.execute(
        "INSERT INTO positions (name, seq) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq",
        (projection.watermark, head),
    )
    return head


async def _drop(resources: Resources, projection: Projection, suffix: str) -> None:
    async with resources.store.transaction() as tx:
        for table in projection.tables:
            await tx.execute(f"DROP TABLE IF EXISTS {table}{suffix}")
