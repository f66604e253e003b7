"""Run a projection as a handler group: dedupe and effect in one transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sluice.events import AnyEvent, type_name
from sluice.projections.base import Projection
from sluice.resources import Resources
from sluice.store import Tx
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec


async def fresh_events(
    tx: Tx, projection: Projection, deliveries: Sequence[Delivery]
) -> list[AnyEvent]:
    """The events not applied yet, recorded as applied in the same transaction.

    An event is already applied when its ``seq`` is at or below the watermark a
    rebuild left, or when its id is in the projection's processed table.
    """
    row = await tx.fetchone("SELECT seq FROM positions WHERE name = ?", (projection.watermark,))
    watermark = int(row[0]) if row else 0
    candidates: dict[str, AnyEvent] = {}
    for delivery in deliveries:
        if 0 < delivery.message.seq <= watermark:
            continue
        candidates.setdefault(delivery.event.event_id, delivery.event)
    if not candidates:
        return []
    ids = list(candidates)
    table = projection.processed_table
    seen = await tx.fetchall(
        f"SELECT event_id FROM {table} WHERE event_id IN ({', '.join('?' * len(ids))})", ids
    )
    for (event_id,) in seen:
        candidates.pop(event_id, None)
    await tx.executemany(f"INSERT INTO {table} (event_id) VALUES (?)", [(i,) for i in candidates])
    return list(candidates.values())


def projection_group(projection: Projection, resources: Resources) -> GroupSpec:
    async def handle(deliveries: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        relevant = [d for d in deliveries if type_name(d.event) in projection.event_types]
        if not relevant:
            return {}
        async with resources.store.transaction() as tx:
            fresh = await fresh_events(tx, projection, relevant)
            if fresh:
                await projection.apply(tx, fresh, "", resources.config)
        if projection.publish is not None:
            # Every relevant event, fresh or not: a redelivery after a crash
            # between commit and publish must still publish.
            await projection.publish(resources, [d.event for d in relevant])
        return {}

    return GroupSpec(name=projection.name, aggregates=projection.aggregates, handler=handle)
