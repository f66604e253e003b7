"""Run a projection as a handler group: dedupe, effect and the batch's delivery records
in one transaction."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.events import Event, type_name
from sluice.process.resources import Resources
from sluice.projections.base import EngineProjection
from sluice.records.deliveries import BATCH, record_in
from sluice.store import Tx
from sluice.streams.messages import Delivery, Duplicate, EntryKey, Message, Outcomes, Recorded
from sluice.streams.spec import GroupSpec
from sluice.telemetry import batch_spans, tracing


async def fresh_events(
    tx: Tx,
    projection: EngineProjection,
    deliveries: Sequence[Delivery],
    batch_id: int | None = None,
) -> list[Event]:
    """The events not applied yet, recorded as applied in the same transaction (each
    processed row naming ``batch_id``, the row of the batch's delivery records).

    An event is already applied when its ``seq`` is at or below the watermark a
    rebuild left, or when its id is in the projection's processed table. The
    ids go in with ``ON CONFLICT DO NOTHING RETURNING``: of two workers
    applying one event at once (a reclaim while its first consumer still runs),
    the second waits for the first to commit and then finds it applied.
    """
    watermark = await _watermark(tx, projection)
    candidates: dict[str, Event] = {}
    for delivery in deliveries:
        if 0 < delivery.message.seq <= watermark:
            continue
        candidates.setdefault(delivery.event.event_id, delivery.event)
    if not candidates:
        return []
    fresh = await tx.insert_new(
        projection.processed_table,
        ("event_id", "batch_id"),
        [(event_id, batch_id) for event_id in candidates],
        "event_id",
    )
    return [candidates[str(event_id)] for (event_id,) in fresh]


async def _watermark(tx: Tx, projection: EngineProjection) -> int:
    """The projection's watermark, its row locked (shared) until ``tx`` ends.

    A replay swaps its tables in after locking that row, so a batch either
    commits into the old tables before the swap (the rebuild covers its events)
    or reads the new watermark after it. The row is made if missing, so there
    is always one to lock.
    """
    sql = "SELECT seq FROM positions WHERE name = ?" + tx.dialect.row_lock("share")
    row = await tx.fetchone(sql, (projection.watermark,))
    if row is None:
        await tx.execute(
            "INSERT INTO positions (name, seq) VALUES (?, 0) ON CONFLICT DO NOTHING",
            (projection.watermark,),
        )
        row = await tx.fetchone(sql, (projection.watermark,))
    return int(row[0]) if row else 0


def _split(relevant: Sequence[Delivery], fresh: set[str]) -> tuple[list[Message], list[Message]]:
    """The messages applied now, and those whose event was applied before (or comes twice
    in the batch: the first copy counts)."""
    seen: set[str] = set()
    applied: list[Message] = []
    duplicates: list[Message] = []
    for delivery in relevant:
        event_id = delivery.event.event_id
        is_copy = event_id not in fresh or event_id in seen
        (duplicates if is_copy else applied).append(delivery.message)
        seen.add(event_id)
    return applied, duplicates


def _outcomes(
    applied: Sequence[Message], duplicates: Sequence[Message], recorded: bool
) -> Outcomes:
    """The outcomes the consumer acks: ``Recorded`` when the attempts went in with the
    effect, else ``Duplicate`` for copies (recorded by the consumer)."""
    if not recorded:
        return dict.fromkeys([m.key for m in duplicates], Duplicate("applied before"))
    # One outcome object per kind, shared: outcomes are read, never raised.
    found: dict[EntryKey, BaseException] = dict.fromkeys([m.key for m in applied], Recorded())
    if duplicates:
        found.update(dict.fromkeys([m.key for m in duplicates], Recorded(duplicate=True)))
    return found


def projection_group(projection: EngineProjection, resources: Resources) -> GroupSpec:
    async def handle(deliveries: Sequence[Delivery]) -> Outcomes:
        relevant = [d for d in deliveries if type_name(d.event) in projection.event_types]
        if not relevant:
            return {}
        if tracing.ENABLED:  # a CONSUMER span per batch, linked to its events' spans
            with batch_spans.processing(relevant, projection.name):
                return await apply(relevant)
        return await apply(relevant)

    async def apply(relevant: Sequence[Delivery]) -> Outcomes:
        batch = BATCH.get()
        async with resources.store.transaction() as tx:
            batch_id = None if batch is None else batch.id
            fresh = await fresh_events(tx, projection, relevant, batch_id)
            if fresh:
                await projection.apply(fresh, tx, "", resources.config)
            applied, duplicates = _split(relevant, {event.event_id for event in fresh})
            if batch is not None:
                await record_in(tx, batch, applied, duplicates)
        if projection.publish is not None:
            # Every relevant event, fresh or not: a redelivery after a crash
            # between commit and publish must still publish.
            await projection.publish([d.event for d in relevant], resources)
        return _outcomes(applied, duplicates, recorded=batch is not None)

    return GroupSpec(
        name=projection.name,
        aggregates=projection.aggregates,
        handler=handle,
        batch=resources.config.projection_batch,
    )
