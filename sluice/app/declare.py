"""``App``: what an application declares, and nothing it does.

An app is a module-level ``App`` object its package builds at import time: its event
types and the aggregates they are published on, handler groups of per-event functions,
projections, cron tasks, delayed jobs, HTTP routes with their OpenAPI operations, and
the migrations of its own tables. Declaring opens no connection and starts nothing:
``sluice.app.loading`` checks every loaded app against the others (names, event types,
routes) and turns the declarations into what the engine runs, in whichever process
kind needs them (the API serves the routes, ``sluice worker`` the groups, the scheduler
the tasks and jobs, ``sluice replay`` the projections).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol, TypeVar

import msgspec
from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram

from sluice.app.checks import SHAPES, check_context, check_shape, check_view
from sluice.app.contexts import D, JobContext
from sluice.app.groups import (
    EVENT_APPS,
    DeadLetterWithContext,
    DepsFactory,
    Group,
    GroupSettings,
    Projection,
    TurnKey,
    check_name,
    checked_run,
)
from sluice.app.jobs import DEFAULT_PRIORITY, Job, flow_options
from sluice.app.redis_keys import RedisKeys
from sluice.app.settings import Settings
from sluice.config import Config
from sluice.events import Event
from sluice.events.registry import Payload, Upcaster
from sluice.flow.spec import Flow
from sluice.http.client_address import Caller
from sluice.http.route_docs import Doc, Route
from sluice.process.resources import Resources
from sluice.scheduler.builtin import Purge
from sluice.scheduler.task_spec import TaskDeclaration, TaskFunction, declare_task
from sluice.store import Tx
from sluice.store.migrate import Migration
from sluice.streams.spec import DeadLetterHook
from sluice.telemetry import prometheus

E = TypeVar("E", bound=Event)
P = TypeVar("P", bound=msgspec.Struct)
# A view: ``async def view(request) -> web.StreamResponse``, or a ``web.View`` class.
View = TypeVar(
    "View", bound=Callable[[web.Request], Awaitable[web.StreamResponse]] | type[web.View]
)
JobFunction = Callable[[P, Tx, JobContext], Awaitable[None]]

ApiContext = Callable[[web.Application], AsyncIterator[None]]
# The hooks sluice's own apps use beyond the above (docs/guides/write-an-app.md, "Beyond
# the usual"): the core's redirect fast path, purges of expired rows, services of the
# scheduler process.
FastPath = Callable[[web.Application], "FastAnswers"]
SchedulerService = Callable[[Resources, str], "Service"]


class FastAnswers(Protocol):
    """Answers ``GET /{segment}`` before the router (and on the wire): (location, status,
    trace id) of a redirect whose visit was recorded, or None for the router to answer."""

    def answer(self, code: str, caller: Caller) -> tuple[str, int, str] | None: ...


class Service(Protocol):
    """Work a scheduler process runs beside the cron tasks until ``stop`` is set."""

    async def run(self, stop: asyncio.Event) -> None: ...


@dataclass
class App:
    """An application on sluice: declare its parts on it, name it in ``SLUICE_APPS`` (or
    the ``sluice.apps`` entry-point group of its package), and every process kind serves
    what it declares.

    ``requires``: the apps whose modules this one imports (their events, their
    helpers); they are loaded first, and loading this one without them is refused.
    ``settings``: the app's own settings (a ``Settings`` subclass), read from their
    ``SLUICE_*`` variables when the app is loaded; ``MySettings.of(ctx)`` reads them.
    ``keys``: the builders of the app's Redis keys (a ``RedisKeys`` subclass);
    ``MyKeys.of(ctx)`` gives them under the deployment's prefix.
    """

    name: str
    requires: tuple[str, ...] = ()
    description: str = ""
    settings: type[Settings] | None = None
    keys: type[RedisKeys] | None = None
    aggregates: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    events: list[type[Event]] = field(default_factory=list, init=False, repr=False)
    upcasters: dict[type[Event], dict[int, Upcaster]] = field(
        default_factory=dict, init=False, repr=False
    )
    groups: dict[str, Group[Any]] = field(default_factory=dict, init=False, repr=False)
    projections: dict[str, Projection] = field(default_factory=dict, init=False, repr=False)
    tasks: dict[str, TaskDeclaration] = field(default_factory=dict, init=False, repr=False)
    jobs: dict[str, Job[Any]] = field(default_factory=dict, init=False, repr=False)
    routes: list[Route] = field(default_factory=list, init=False, repr=False)
    migrations: list[Migration] = field(default_factory=list, init=False, repr=False)
    api_contexts: list[ApiContext] = field(default_factory=list, init=False, repr=False)
    fast_paths: list[FastPath] = field(default_factory=list, init=False, repr=False)
    purges: list[Purge] = field(default_factory=list, init=False, repr=False)
    scheduler_services: list[SchedulerService] = field(default_factory=list, init=False, repr=False)
    metrics: list[str] = field(default_factory=list, init=False, repr=False)
    tags: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        check_name("app", self.name)
        self.requires = tuple(self.requires)

    # Events -----------------------------------------------------------------------

    def aggregate(self, name: str, *, key: str) -> None:
        """Declare an aggregate type: its events go to the streams ``<prefix>:<name>``,
        partitioned by the field ``key`` of each event (so one aggregate's events stay
        in order)."""
        check_name("aggregate", name)
        self.aggregates[name] = key

    def event(self, cls: type[E]) -> type[E]:
        """Declare an event type (a class decorator). The class subclasses ``Event`` with
        ``frozen=True, kw_only=True, tag=True``, names its ``aggregate`` in a ClassVar,
        and is named in the past tense; its name is its type in the history."""
        self.events.append(cls)
        EVENT_APPS[cls] = self.name
        return cls

    def upcaster(
        self, event_type: type[Event], from_version: int
    ) -> Callable[[Callable[[Payload], Payload]], Callable[[Payload], Payload]]:
        """Declare ``def up(payload: dict) -> dict``, turning the payload of an
        ``event_type`` written at ``from_version`` into that of ``from_version + 1``.
        An event type at version ``n`` (its ``v`` defaults to ``n``) has one for each of
        1..n-1, so every stored event decodes as the current class."""

        def declare(function: Callable[[Payload], Payload]) -> Callable[[Payload], Payload]:
            what = f"@upcaster({event_type.__name__}, from_version={from_version})"
            check_shape(self.name, what, function, ("payload",), coroutine=False)
            self.upcasters.setdefault(event_type, {})[from_version] = function
            return function

        return declare

    # Work -------------------------------------------------------------------------

    def group(
        self,
        name: str,
        *,
        retry_base_ms: int | None = None,
        max_deliveries: int | None = None,
        timeout_seconds: float | None = None,
        concurrency: int | None = None,
        batch: int | None = None,
        on_dead_letter: DeadLetterHook | DeadLetterWithContext | None = None,
        deps: DepsFactory[D] | None = None,
        turns: TurnKey | None = None,
        flow: Flow | None = None,
    ) -> Group[D]:
        """Declare a handler group (``sluice worker NAME``); add handlers with
        ``@group.on(EventType)`` and ``@group.once(EventType)``, or one
        ``@group.batch(EventType, ...)``.

        ``deps``: ``deps(resources)``, called once per worker process as the group
        starts (a bad setting fails the start), gives what its handlers reach as
        ``ctx.deps`` (an ``async def close()`` or ``aclose()`` of it is awaited when the
        worker stops). ``turns``: ``turns(event)``, a key (an owner's id, say) by which
        the events of one read start in rounds, each key's first, then each key's
        second, ... so that one key's many events never stand in front of another's
        first. ``on_dead_letter``: ``async def hook(message, error)`` or
        ``hook(message, error, ctx)``, called once an entry went to the dead letters.
        ``flow``: ``Flow(key=..., concurrency=..., rate=..., total_rate=...)``, limits per
        key of each event across every worker, with fair turns between keys (the
        deployment's ``SLUICE_<GROUP>_KEY_CONCURRENCY``, ``_KEY_RATE`` and ``_RATE`` win)."""
        if name in self.groups:
            raise ValueError(f"app {self.name!r} declares group {name!r} twice")
        run = checked_run(self.name, name, deps, turns, on_dead_letter, flow)
        settings = GroupSettings(retry_base_ms, max_deliveries, timeout_seconds, concurrency, batch)
        group = Group(self, name, settings, run)
        self.groups[name] = group
        return group

    def projection(
        self,
        name: str,
        *,
        events: Sequence[type[Event]],
        schema: str | Sequence[str],
        tables: Sequence[str],
        replaces: Sequence[Sequence[int]] = (),
        replaces_migrations: Sequence[Sequence[int]] = (),
    ) -> Projection:
        """Declare a projection; give it its apply function with ``@projection.apply``.
        Each entry of ``schema`` is applied once, in order, as a migration of its own
        (so a later version adds to the tables: ALTER, CREATE INDEX); a replay applies
        them all to fresh tables. The processed table that makes each event count once
        (``<name>_processed``) is made for you unless ``schema`` makes it.
        ``replaces_migrations``: per schema step, the app's own migrations (``migration``)
        that made its tables before the projection held them; a database that applied
        them keeps its tables, and records the step as done without running it."""
        check_name("projection", name)
        steps = (schema,) if isinstance(schema, str) else tuple(schema)
        declared = Projection(
            self,
            name,
            tuple(events),
            steps,
            tuple(tables),
            tuple(map(tuple, replaces)),
            tuple(map(tuple, replaces_migrations)),
        )
        self.projections[name] = declared
        return declared

    def task(
        self,
        name: str,
        *,
        cron: str | Callable[[Config], str],
        timezone: str | Callable[[Config], str] = "UTC",
        description: str = "",
        overlap: str = "skip",
        catchup_seconds: float = 0.0,
        jitter_seconds: float = 0.0,
        timeout_seconds: float | None = None,
    ) -> Callable[[TaskFunction], TaskFunction]:
        """Declare ``async def task(ctx)`` run once per occurrence of ``cron`` (six fields,
        seconds first) in ``timezone`` across every scheduler, with a run record, a lock
        and ``ctx.checkpoint(cursor)``. The policies here are defaults: the deployment's
        ``SLUICE_<TASK>_OVERLAP``, ``_CATCHUP_SECONDS``, ``_JITTER_SECONDS`` and
        ``_TIMEOUT_SECONDS`` win."""
        check_name("task", name)
        return declare_task(
            self.tasks,
            name,
            cron=cron,
            timezone=timezone,
            description=description,
            overlap=overlap,
            catchup_seconds=catchup_seconds,
            jitter_seconds=jitter_seconds,
            timeout_seconds=timeout_seconds,
            check=lambda f: check_shape(self.name, f"task {name!r}", f, SHAPES["task"]),
        )

    def job(
        self,
        name: str,
        *,
        payload: type[P],
        group: Group[Any] | None = None,
        priority: int = DEFAULT_PRIORITY,
        debounce: timedelta | None = None,
        max_wait: timedelta | None = None,
        flow_key: Callable[[P], str | None] | None = None,
    ) -> Callable[[JobFunction[P]], Job[P]]:
        """Declare a delayed job: ``async def run(payload, tx, ctx)``, applied once in a
        transaction when it falls due. The decorator gives the ``Job``, whose
        ``schedule(tx, payload, key=..., at=/delay=, priority=)`` and ``cancel(tx, key)``
        are called inside the transaction that decides them. It runs in ``group`` (by
        default the app's group ``<app>-jobs``), with that group's retries; ``priority``,
        ``debounce`` and ``max_wait``: docs/concepts/job-flow.md. ``flow_key(payload)``: the
        key of a run for ``group``'s ``flow=`` (docs/concepts/flow-control.md)."""
        check_name("job", name)
        options = flow_options(f"app {self.name!r}: job {name!r}", priority, debounce, max_wait)

        def declare(function: JobFunction[P]) -> Job[P]:
            check_shape(self.name, f"job {name!r}", function, SHAPES["job"])
            owner = group or self._jobs_group()
            if owner.batch_function is not None:
                raise ValueError(
                    f"app {self.name!r}: job {name!r} cannot run in group {owner.name!r},"
                    " whose only handler is its @batch"
                )
            if flow_key is not None and owner.run.flow is None:
                raise ValueError(
                    f"app {self.name!r}: job {name!r} has a flow_key, but its group"
                    f" {owner.name!r} has no flow= to count it by"
                )
            job: Job[P] = Job(name, payload, function, owner.name, *options, flow_key)
            if name in self.jobs:
                raise ValueError(f"app {self.name!r} declares job {name!r} twice")
            self.jobs[name] = job
            owner.jobs[name] = job
            return job

        return declare

    def _jobs_group(self) -> Group[Any]:
        name = f"{self.name}-jobs"
        return self.groups.get(name) or self.group(name)

    # The API and the schema ----------------------------------------------------------

    def route(
        self, method: str, path: str, *, doc: Doc, structs: Sequence[type] = ()
    ) -> Callable[[View], View]:
        """Declare an aiohttp view at ``method path`` with its OpenAPI operation ``doc``
        (and the Structs its ``$ref``s name), served by every API process."""

        def declare(view: View) -> View:
            self.add_routes([Route(method.upper(), path, view, doc, tuple(structs))])
            return view

        return declare

    def add_routes(self, routes: Sequence[Route]) -> None:
        """Routes declared as ``Route`` values, in their order. In the OpenAPI document
        each is in the app's group (its tag: the app's name, described by its
        ``description``) unless its operation names its own tags."""
        for route in routes:
            check_view(self.name, route.method, route.path, route.view)
            doc = route.doc if "tags" in route.doc else {"tags": [self.name], **route.doc}
            self.routes.append(dataclasses.replace(route, doc=doc))

    def api_context(self, context: ApiContext) -> ApiContext:
        """Declare an aiohttp ``cleanup_ctx`` of the API process: set up what the app's
        views share (a cache, a client) before ``yield``, release it after."""
        check_context(self.name, context)
        self.api_contexts.append(context)
        return context

    def tag(self, name: str, description: str) -> None:
        """Declare an OpenAPI tag (a group of operations in ``/docs``) that the app's
        routes may name in their ``tags``; the app's own name is one already."""
        self.tags[name] = description

    # Metrics ------------------------------------------------------------------------

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        """Declare a Prometheus counter that ``GET /metrics`` shows (its samples add
        ``_total``) and the metrics reference lists; keep the object to ``inc()`` it."""
        self.metrics.append(name)
        return prometheus.counter(name, documentation, labels)

    def histogram(
        self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> Histogram:
        """Declare a Prometheus histogram with these bucket bounds (seconds, bytes...)."""
        self.metrics.append(name)
        return prometheus.histogram(name, documentation, labels, buckets)

    def gauge(self, name: str, documentation: str) -> Gauge:
        """Declare a gauge each process sets; ``/metrics`` shows the sum over the live
        processes of the host."""
        self.metrics.append(name)
        return prometheus.live_sum(name, documentation)

    # Beyond the usual: the hooks sluice's own apps use --------------------------------

    def fast_path(self, factory: FastPath) -> FastPath:
        """Declare what answers ``GET /{segment}`` first, as each request head is parsed:
        ``factory(app)`` (on the API's startup, after every ``api_context``) returns a
        ``FastAnswers``. One app of a deployment may (the links app's redirect)."""
        self.fast_paths.append(factory)
        return factory

    def purge(self, function: Purge) -> Purge:
        """Declare ``async def purge(store, now) -> {"rows": n}``: rows past any use that
        the core's ``purge-expired`` task deletes on its schedule (idempotent: a run
        that dies midway runs it again); the counts join the task's log line."""
        check_shape(self.name, "purge", function, SHAPES["purge"])
        self.purges.append(function)
        return function

    def scheduler_service(self, factory: SchedulerService) -> SchedulerService:
        """Declare work every scheduler process runs beside the cron tasks:
        ``factory(resources, holder)`` returns a ``Service`` (its ``run(stop)``); the
        holder names the process in the locks and claims it takes."""
        self.scheduler_services.append(factory)
        return factory

    def migration(self, version: int, name: str, sql: str, *, replaces: Sequence[int] = ()) -> None:
        """Declare step ``version`` (1, 2, ...) of the app's own tables: DDL in SQLite's
        words (sluice says it in PostgreSQL's), applied once per database, in order,
        together with sluice's, one process at a time."""
        if any(m.version == version for m in self.migrations):
            raise ValueError(f"app {self.name!r} declares migration {version} twice")
        self.migrations.append(Migration(self.name, version, name, sql, tuple(replaces)))
