"""From an app's declarations to what the engine runs: group specs and projections.

An app's group is an ``event_group`` (``sluice.consumers.dispatch``) like sluice's own:
the consumer runtime reads its streams, reclaims, retries with backoff and dead-letters
exactly as it does for ``mail``. Two kinds of handler run in it:

- ``@group.on``: ``handler(event, ctx)``, an effect outside the database;
- ``@group.once`` and delayed jobs: ``handler(event, tx, ctx)`` inside a transaction
  that first inserts the group's record of the event (``handled_events``, keyed by
  group and event id). The record and the handler's writes commit together, so an
  event redelivered after the commit finds its record and is acked as a duplicate
  without a call, and one whose handler failed left nothing behind to retry over.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sluice.app.contexts import HandlerContext, JobContext, ProjectionContext
from sluice.app.groups import Group, Projection
from sluice.config import Config
from sluice.consumers.dispatch import event_group
from sluice.errors import ConfigError
from sluice.events import Event, JobDue, utcnow
from sluice.process.resources import Resources
from sluice.projections.base import EngineProjection
from sluice.store import Tx
from sluice.store.migrate import Migration
from sluice.store.users import db_time
from sluice.streams.messages import Delivery, Duplicate
from sluice.streams.spec import GroupSpec


class _Once:
    """A handler applied once: ``function(event, tx, ctx)``."""

    __slots__ = ("function",)

    def __init__(self, function: Any) -> None:
        self.function = function


class _Jobs:
    """The group's delayed jobs: a ``JobDue`` runs the job it names, once."""

    __slots__ = ("jobs",)

    def __init__(self, jobs: dict[str, Any]) -> None:
        self.jobs = jobs


async def handled_first_time(tx: Tx, group: str, event_id: str) -> bool:
    """Record that ``group`` handled ``event_id``, in ``tx``; False if it did before."""
    fresh = await tx.insert_new(
        "handled_events",
        ("group_name", "event_id", "handled_at"),
        [(group, event_id, db_time(utcnow()))],
        "event_id",
    )
    return bool(fresh)


def group_aggregates(group: Group) -> tuple[str, ...]:
    aggregates = {event_type.aggregate for event_type in group.event_types}
    if group.jobs:
        aggregates.add(JobDue.aggregate)
    return tuple(sorted(aggregates))


def group_spec(group: Group, resources: Resources) -> GroupSpec:
    """The engine's group for an app's ``group``."""
    name, settings = group.name, group.settings
    handlers: dict[type[Event], Any] = dict(group.handlers)
    handlers.update({t: _Once(f) for t, f in group.once_handlers.items()})
    if group.jobs:
        handlers[JobDue] = _Jobs(group.jobs)

    async def once(event: Event, apply: Callable[[Tx], Awaitable[None]]) -> None:
        async with resources.store.transaction() as tx:
            if not await handled_first_time(tx, name, event.event_id):
                raise Duplicate(f"{name} handled {event.event_id} before")
            await apply(tx)

    async def invoke(handler: Any, delivery: Delivery, _: object) -> None:
        message, event = delivery.message, delivery.event
        ctx = HandlerContext(resources, name, message.deliveries, message.trace_id)
        if isinstance(handler, _Once):
            await once(event, lambda tx: handler.function(event, tx, ctx))
        elif isinstance(handler, _Jobs):
            assert isinstance(event, JobDue)
            job = handler.jobs.get(event.job)
            if job is None:
                return  # another group's job: it reads the same stream
            payload = job.decode(event)
            job_ctx = JobContext(
                resources, name, message.deliveries, message.trace_id, job=event.job, key=event.key
            )
            await once(event, lambda tx: job.run(payload, tx, job_ctx))
        else:
            await handler(event, ctx)

    concurrency = settings.concurrency or resources.config.worker_concurrency
    spec = event_group(
        name, group_aggregates(group), handlers, None, concurrency, group.on_dead_letter, invoke
    )
    return GroupSpec(
        spec.name,
        spec.aggregates,
        spec.handler,
        spec.on_dead_letter,
        batch=settings.batch,
        retry_base_ms=settings.retry_base_ms,
        max_deliveries=settings.max_deliveries,
        handler_timeout_s=settings.timeout_seconds,
    )


def _processed_ddl(projection: Projection) -> str:
    return (
        f"CREATE TABLE {projection.processed_table}{{s}} (\n"
        "    event_id TEXT PRIMARY KEY,\n    batch_id INTEGER\n) WITHOUT ROWID;\n"
    )


def _schema(projection: Projection) -> tuple[str, ...]:
    """The projection's schema steps, the first making its processed table unless the
    projection's own DDL does (sluice's older projections make theirs)."""
    steps = projection.schema
    if f"CREATE TABLE {projection.processed_table}{{s}}" in "".join(steps):
        return steps
    return (_processed_ddl(projection) + steps[0], *steps[1:])


def projection_migrations(projection: Projection) -> list[Migration]:
    """The live tables of ``projection``: each schema step, applied once."""
    owner, app = f"projection:{projection.name}", projection.app.name
    replaces, moved = projection.replaces, projection.replaces_migrations
    return [
        Migration(
            owner,
            n,
            f"{projection.name} schema {n}",
            step.format(s=""),
            replaces[n - 1] if n <= len(replaces) else (),
            tuple((app, version) for version in moved[n - 1]) if n <= len(moved) else (),
        )
        for n, step in enumerate(_schema(projection), start=1)
    ]


def engine_projection(projection: Projection) -> EngineProjection:
    """The engine's projection (its live group, ``sluice replay``) for an app's."""
    apply_function, payloads = projection.apply_function, projection.payloads_function
    if apply_function is None:
        raise ConfigError(
            f"app {projection.app.name!r}: projection {projection.name!r} has no @apply function"
        )
    tables = frozenset(projection.tables)

    def context(suffix: str, config: Config) -> ProjectionContext:
        return ProjectionContext(tables, suffix, config)

    async def apply(events: Sequence[Event], tx: Tx, suffix: str, config: Config) -> None:
        await apply_function(events, tx, context(suffix, config))

    async def apply_payloads(data: bytes | str, tx: Tx, suffix: str, config: Config) -> None:
        assert payloads is not None
        await payloads(data, tx, context(suffix, config))

    return EngineProjection(
        name=projection.name,
        aggregates=tuple(sorted({e.aggregate for e in projection.events})),
        event_types=tuple(e.__name__ for e in projection.events),
        ddl="".join(_schema(projection)),
        tables=(*projection.tables, projection.processed_table),
        apply=apply,
        apply_payloads=None if payloads is None else apply_payloads,
        publish=projection.publish_function,
        republish=projection.republish_function,
    )
