"""From an app's declarations to what the engine runs: group specs and projections.

An app's group is an ``event_group`` (``sluice.consumers.dispatch``) like sluice's own:
the consumer runtime reads its streams, reclaims, retries with backoff and dead-letters
exactly as it does for sluice's own. Three kinds of handler run in it:

- ``@group.on``: ``handler(event, ctx)``, an effect outside the database;
- ``@group.once`` and delayed jobs: ``handler(event, tx, ctx)`` inside a transaction
  that first inserts the group's record of the event (``handled_events``, keyed by
  group and event id). The record and the handler's writes commit together, so an
  event redelivered after the commit finds its record and is acked as a duplicate
  without a call, and one whose handler failed left nothing behind to retry over;
- ``@group.batch``: ``handle(events, ctx)``, once per read, its failures by event id
  mapped back to their entries.

The group's ``deps`` are built here, once per process and group (``group_spec``), and
handed to every call in ``ctx.deps``; ``turns`` reorders each read before the calls.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Container, Hashable, Sequence
from itertools import zip_longest
from typing import Any, Final, cast

import structlog

from sluice.app.contexts import HandlerContext, JobContext, ProjectionContext
from sluice.app.groups import DeadLetterWithContext, Group, Projection, TurnKey
from sluice.app.job_flow import release, release_now
from sluice.config import Config
from sluice.consumers.dispatch import event_group
from sluice.errors import ConfigError
from sluice.events import Event, JobDue, utcnow
from sluice.flow.spec import Flow, with_overrides
from sluice.process.resources import Resources
from sluice.projections.base import EngineProjection
from sluice.store import Tx
from sluice.store.migrate import Migration
from sluice.store.users import db_time
from sluice.streams.messages import BatchHandler, Delivery, Duplicate, Message, Outcomes
from sluice.streams.spec import DeadLetterHook, GroupSpec
from sluice.telemetry import batch_spans, run_spans, tracing

# ``group_spec``'s default: build the group's deps from its factory.
BUILD: Final = object()
# The turn of the events a group does not handle (acked without a call).
_UNHANDLED: Final = object()


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


def group_aggregates(group: Group[Any]) -> tuple[str, ...]:
    aggregates = {event_type.aggregate for event_type in group.event_types}
    if group.jobs:
        aggregates.add(JobDue.aggregate)
    return tuple(sorted(aggregates))


def _closer(deps: object) -> Callable[[], Awaitable[None]] | None:
    """The deps' ``async def aclose()`` (or ``close()``), awaited as the worker stops."""
    for name in ("aclose", "close"):
        method = getattr(deps, name, None)
        if method is not None and inspect.iscoroutinefunction(method):
            return cast(Callable[[], Awaitable[None]], method)
    return None


def group_spec(group: Group[Any], resources: Resources, deps: Any = BUILD) -> GroupSpec:
    """The engine's group for an app's ``group``, its ``deps`` built now (once per worker
    process) unless given."""
    name, settings, run = group.name, group.settings, group.run
    close = None
    if deps is BUILD:
        deps = None if run.deps is None else run.deps(resources)
        close = _closer(deps)
    if group.batch_function is not None:
        handler = batch_handler(group, resources, deps)
    else:
        handler = _per_event(group, resources, deps)
    return GroupSpec(
        name,
        group_aggregates(group),
        handler,
        _dead_letter_hook(group, resources, deps),
        batch=settings.batch,
        retry_base_ms=settings.retry_base_ms,
        max_deliveries=settings.max_deliveries,
        handler_timeout_s=settings.timeout_seconds,
        close=close,
        flow=None if run.flow is None else with_overrides(name, _job_keys(group), resources.config),
    )


def _traced(run: Awaitable[None], event: JobDue, message: Message, group: str) -> Awaitable[None]:
    """A job's ``run``; with tracing on, a span of its own in its scheduler's trace."""
    return run_spans.job_run(run, event, message, group) if tracing.ENABLED else run


async def _run_job(job: Any, payload: Any, tx: Tx, ctx: JobContext, event_id: str) -> None:
    await release(tx, event_id)  # the job's room in its group, freed as it commits
    await job.run(payload, tx, ctx)


def _keyed(group: Group[Any]) -> Flow:
    """The group's flow, its key field checked: one of the group's event types has it (a
    misspelt field would leave every event unlimited)."""
    flow = group.run.flow
    assert flow is not None
    types: list[type[Event]] = [*group.event_types, *([JobDue] if group.jobs else [])]
    if isinstance(flow.key, str) and not any(flow.key in t.__struct_fields__ for t in types):
        raise ConfigError(
            f"app {group.app.name!r}: group {group.name!r}, Flow(key={flow.key!r}): no event"
            f" type the group handles has that field ({', '.join(t.__name__ for t in types)})"
        )
    return flow


def _job_keys(group: Group[Any]) -> Flow:
    """The group's flow, a run of a job that names a ``flow_key`` keyed by it (of the
    job's payload); other events, and runs of other jobs, by the flow's own key."""
    flow = _keyed(group)
    jobs = {name: job for name, job in group.jobs.items() if job.flow_key is not None}
    if not jobs:
        return flow
    own = flow.key_of()

    def key(event: Any) -> str | None:
        job = jobs.get(event.job) if type(event) is JobDue else None
        if job is None or job.flow_key is None:
            return own(event)
        return job.flow_key(job.decode(event))

    return dataclasses.replace(flow, key=key)


def _dead_letter_hook(group: Group[Any], resources: Resources, deps: Any) -> DeadLetterHook | None:
    hook = _app_dead_letter_hook(group, resources, deps)
    if not group.jobs:
        return hook

    async def on_dead_letter(message: Message, error: BaseException) -> None:
        # A job given up on no longer holds a place among its group's fired jobs.
        await release_now(resources.store, message.event_id)
        if hook is not None:
            await hook(message, error)

    return on_dead_letter


def _app_dead_letter_hook(
    group: Group[Any], resources: Resources, deps: Any
) -> DeadLetterHook | None:
    hook, run = group.on_dead_letter, group.run
    if hook is None or not run.dead_letter_ctx:
        return cast(DeadLetterHook | None, hook)
    with_ctx = cast(DeadLetterWithContext, hook)

    async def on_dead_letter(message: Message, error: BaseException) -> None:
        ctx = HandlerContext(resources, group.name, message.deliveries, message.trace_id, deps)
        await with_ctx(message, error, ctx)

    return on_dead_letter


def _per_event(group: Group[Any], resources: Resources, deps: Any) -> BatchHandler:
    """The batch handler of a group of per-event handlers (``on``, ``once``, jobs)."""
    name = group.name
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
        ctx = HandlerContext(resources, name, message.deliveries, message.trace_id, deps)
        if isinstance(handler, _Once):
            await once(event, lambda tx: handler.function(event, tx, ctx))
        elif isinstance(handler, _Jobs):
            assert isinstance(event, JobDue)
            job = handler.jobs.get(event.job)
            if job is None:
                return  # another group's job: it reads the same stream
            payload = job.decode(event)
            job_ctx = JobContext(
                resources,
                name,
                message.deliveries,
                message.trace_id,
                deps,
                job=event.job,
                key=event.key,
            )
            run = once(event, lambda tx: _run_job(job, payload, tx, job_ctx, event.event_id))
            await _traced(run, event, message, name)
        else:
            await handler(event, ctx)

    concurrency = group.settings.concurrency or resources.config.worker_concurrency
    spec = event_group(name, (), handlers, None, concurrency, None, invoke)
    turns = group.run.turns
    if turns is None:
        return spec.handler
    run_batch = spec.handler

    async def taking_turns(deliveries: Sequence[Delivery]) -> Outcomes:
        # event_group starts them in this order, each waiting for a free place.
        return await run_batch(in_turns(deliveries, turns, handlers))

    return taking_turns


def in_turns(
    deliveries: Sequence[Delivery], key: TurnKey, handled: Container[type[Event]]
) -> list[Delivery]:
    """The read in rounds by ``key(event)`` (each key keeps its own order): every key's
    first, then every key's second, ...; keys in the order their first event came.
    Events the group does not handle (acked without a call) make one key of their own."""
    queues: dict[Hashable, list[Delivery]] = {}
    for delivery in deliveries:
        event = delivery.event
        turn = key(event) if type(event) in handled else _UNHANDLED
        queues.setdefault(turn, []).append(delivery)
    rounds = zip_longest(*queues.values())
    return [delivery for turn in rounds for delivery in turn if delivery is not None]


def batch_handler(group: Group[Any], resources: Resources, deps: Any) -> BatchHandler:
    """The batch handler of a group declared with ``@group.batch``: the events of its
    types, one call; the failures it names by event id, mapped back to their entries."""
    name, function, types = group.name, group.batch_function, frozenset(group.batch_types)
    assert function is not None

    async def handle(deliveries: Sequence[Delivery]) -> Outcomes:
        wanted = [d for d in deliveries if type(d.event) in types]
        if not wanted:
            return {}
        if tracing.ENABLED:  # a CONSUMER span per batch, linked to its events' spans
            with batch_spans.processing(wanted, name):
                return await call(wanted)
        return await call(wanted)

    async def call(wanted: Sequence[Delivery]) -> Outcomes:
        attempt = max(d.message.deliveries for d in wanted)
        ctx = HandlerContext(resources, name, attempt, "", deps)
        with structlog.contextvars.bound_contextvars(group=name):
            failed = await function([d.event for d in wanted], ctx)
        if not failed:
            return {}
        return {
            d.message.key: failed[d.event.event_id] for d in wanted if d.event.event_id in failed
        }

    return handle


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
