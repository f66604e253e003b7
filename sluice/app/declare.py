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

import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from sluice.app.contexts import HandlerContext, JobContext, ProjectionContext
from sluice.app.jobs import Job
from sluice.config import Config
from sluice.event_registry import Upcaster
from sluice.events import Event
from sluice.http.apidoc import Doc, Route
from sluice.resources import Resources
from sluice.scheduler.tasks import TaskFunction
from sluice.store import Tx
from sluice.store.migrate import Migration
from sluice.streams.spec import DeadLetterHook, GroupSpec

E = TypeVar("E", bound=Event)
P = TypeVar("P", bound=msgspec.Struct)
F = TypeVar("F", bound=Callable[..., Any])

NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")

# A plain handler: an effect outside the database (a mail, a call), which must be
# idempotent by itself (key it by ``event.event_id``); the group retries it until it
# succeeds or goes to the dead letters.
Handler = Callable[[Any, HandlerContext], Awaitable[None]]
# A handler applied once: called inside a store transaction that also records the
# event as handled by the group, so its writes (and the events it appends) commit once
# whatever the redeliveries; a redelivery after the commit is acked without a call.
OnceHandler = Callable[[Any, Tx, HandlerContext], Awaitable[None]]
ProjectionApply = Callable[[Tx, Sequence[Any], ProjectionContext], Awaitable[None]]
ApiContext = Callable[[web.Application], AsyncIterator[None]]


def check_name(kind: str, name: str) -> str:
    if not NAME.fullmatch(name):
        raise ValueError(
            f"{kind} name {name!r}: 1 to 63 characters of a-z, 0-9 and '-', starting with a letter"
        )
    return name


@dataclass(frozen=True)
class GroupSettings:
    """A group's consumer settings; None takes the deployment's (``SLUICE_*``). A
    ``SLUICE_<GROUP>_TIMEOUT_SECONDS`` setting overrides ``timeout_seconds``."""

    retry_base_ms: int | None = None  # backoff: base * 2^(attempt-1), with jitter
    max_deliveries: int | None = None  # attempts before the dead letters
    timeout_seconds: float | None = None  # an attempt's deadline
    concurrency: int | None = None  # handlers running at once per consumer
    batch: int | None = None  # entries per read


class Group:
    """A handler group: functions per event type, consumed by ``sluice worker NAME`` with
    competing consumers, retries with backoff, and dead letters after the last attempt."""

    def __init__(
        self,
        app: App,
        name: str,
        settings: GroupSettings,
        on_dead_letter: DeadLetterHook | None,
    ) -> None:
        self.app = app
        self.name = check_name("group", name)
        self.settings = settings
        self.on_dead_letter = on_dead_letter
        self.handlers: dict[type[Event], Handler] = {}
        self.once_handlers: dict[type[Event], OnceHandler] = {}
        self.jobs: dict[str, Job[Any]] = {}

    def on(self, event_type: type[E]) -> Callable[[F], F]:
        """Declare ``async def handler(event, ctx)`` for ``event_type``: an effect outside
        the database, retried until it succeeds (make it idempotent by the event's id)."""
        return self._add(event_type, self.handlers)

    def once(self, event_type: type[E]) -> Callable[[F], F]:
        """Declare ``async def handler(event, tx, ctx)`` for ``event_type``, applied exactly
        once: ``tx`` commits the handler's writes (and the events it appends) together
        with the record that this group handled the event."""
        return self._add(event_type, self.once_handlers)

    def _add(self, event_type: type[E], into: dict[type[Event], Any]) -> Callable[[F], F]:
        if event_type in self.handlers or event_type in self.once_handlers:
            raise ValueError(f"group {self.name!r} handles {event_type.__name__} twice")

        def declare(function: F) -> F:
            into[event_type] = function
            return function

        return declare

    @property
    def event_types(self) -> tuple[type[Event], ...]:
        return (*self.handlers, *self.once_handlers)


@dataclass
class Projection:
    """A read model kept by a group of its own (named after it) and rebuilt from the
    history by ``sluice replay NAME``. ``schema``: its versions, each DDL with ``{s}``
    after every table and index name (empty for the live tables, a generation tag
    while a replay rebuilds them); ``tables``: the tables it creates."""

    app: App
    name: str
    events: tuple[type[Event], ...]
    schema: tuple[str, ...]
    tables: tuple[str, ...]
    replaces: tuple[tuple[int, ...], ...] = ()
    apply_function: ProjectionApply | None = None
    payloads_function: Callable[[Tx, bytes | str, ProjectionContext], Awaitable[None]] | None = None
    publish_function: Callable[[Resources, Sequence[Any]], Awaitable[None]] | None = None
    republish_function: Callable[[Resources], Awaitable[None]] | None = None

    def apply(self, function: F) -> F:
        """Declare ``async def apply(tx, events, ctx)``: the effect of a batch of events
        not applied before, written into ``ctx.table(name)`` (the live table, or the one
        a replay is building)."""
        self.apply_function = function
        return function

    def apply_payloads(self, function: F) -> F:
        """Optional, for speed: ``async def apply(tx, payloads, ctx)`` takes the stored
        payloads of a replay's chunk as one JSON array, in no guaranteed order."""
        self.payloads_function = function
        return function

    def publish(self, function: F) -> F:
        """Optional: ``async def publish(resources, events)`` writes derived state outside
        the database (absolute values: it may run again for the same events)."""
        self.publish_function = function
        return function

    def republish(self, function: F) -> F:
        """Optional: ``async def republish(resources)`` rewrites that state after a replay."""
        self.republish_function = function
        return function

    @property
    def processed_table(self) -> str:
        return f"{self.name.replace('-', '_')}_processed"


@dataclass(frozen=True)
class TaskDeclaration:
    name: str
    run: TaskFunction
    cron: str | Callable[[Config], str]
    timezone: str | Callable[[Config], str]
    description: str
    overlap: str = "skip"
    catchup_seconds: float = 0.0
    jitter_seconds: float = 0.0
    timeout_seconds: float | None = None


@dataclass
class App:
    """An application on sluice: declare its parts on it, name it in ``SLUICE_APPS`` (or
    the ``sluice.apps`` entry-point group of its package), and every process kind serves
    what it declares.

    ``requires``: the apps whose modules this one imports (their events, their
    helpers); they are loaded first, and loading this one without them is refused.
    """

    name: str
    requires: tuple[str, ...] = ()
    description: str = ""
    aggregates: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    events: list[type[Event]] = field(default_factory=list, init=False, repr=False)
    upcasters: dict[type[Event], dict[int, Upcaster]] = field(
        default_factory=dict, init=False, repr=False
    )
    groups: dict[str, Group] = field(default_factory=dict, init=False, repr=False)
    batch_groups: dict[str, tuple[tuple[str, ...], Callable[[Resources], GroupSpec]]] = field(
        default_factory=dict, init=False, repr=False
    )
    projections: dict[str, Projection] = field(default_factory=dict, init=False, repr=False)
    tasks: dict[str, TaskDeclaration] = field(default_factory=dict, init=False, repr=False)
    jobs: dict[str, Job[Any]] = field(default_factory=dict, init=False, repr=False)
    routes: list[Route] = field(default_factory=list, init=False, repr=False)
    migrations: list[Migration] = field(default_factory=list, init=False, repr=False)
    api_contexts: list[ApiContext] = field(default_factory=list, init=False, repr=False)

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
        return cls

    def upcaster(self, event_type: type[Event], from_version: int) -> Callable[[F], F]:
        """Declare ``def up(payload: dict) -> dict``, turning the payload of an
        ``event_type`` written at ``from_version`` into that of ``from_version + 1``.
        An event type at version ``n`` (its ``v`` defaults to ``n``) has one for each of
        1..n-1, so every stored event decodes as the current class."""

        def declare(function: F) -> F:
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
        on_dead_letter: DeadLetterHook | None = None,
    ) -> Group:
        """Declare a handler group (``sluice worker NAME``); add handlers with
        ``@group.on(EventType)`` and ``@group.once(EventType)``."""
        if name in self.groups:
            raise ValueError(f"app {self.name!r} declares group {name!r} twice")
        settings = GroupSettings(retry_base_ms, max_deliveries, timeout_seconds, concurrency, batch)
        group = Group(self, name, settings, on_dead_letter)
        self.groups[name] = group
        return group

    def batch_group(
        self,
        name: str,
        aggregates: Sequence[str],
        build: Callable[[Resources], GroupSpec],
    ) -> None:
        """Declare a group whose batch handler is built by ``build`` (advanced: it gets
        every delivery of a read and answers their outcomes, as sluice's own do)."""
        self.batch_groups[check_name("group", name)] = (tuple(aggregates), build)

    def projection(
        self,
        name: str,
        *,
        events: Sequence[type[Event]],
        schema: str | Sequence[str],
        tables: Sequence[str],
        replaces: Sequence[Sequence[int]] = (),
    ) -> Projection:
        """Declare a projection; give it its apply function with ``@projection.apply``.
        Each entry of ``schema`` is applied once, in order, as a migration of its own
        (so a later version adds to the tables: ALTER, CREATE INDEX); a replay applies
        them all to fresh tables. The processed table that makes each event count once
        (``<name>_processed``) is made for you unless ``schema`` makes it."""
        check_name("projection", name)
        steps = (schema,) if isinstance(schema, str) else tuple(schema)
        declared = Projection(
            self, name, tuple(events), steps, tuple(tables), tuple(map(tuple, replaces))
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

        def declare(function: TaskFunction) -> TaskFunction:
            self.tasks[name] = TaskDeclaration(
                name, function, cron, timezone, description or (function.__doc__ or "").strip(),
                overlap, catchup_seconds, jitter_seconds, timeout_seconds,
            )  # fmt: skip
            return function

        return declare

    def job(
        self, name: str, *, payload: type[P], group: Group | None = None
    ) -> Callable[[Callable[[P, Tx, JobContext], Awaitable[None]]], Job[P]]:
        """Declare a delayed job: ``async def run(payload, tx, ctx)``, applied once in a
        transaction when it falls due. The decorator gives the ``Job``, whose
        ``schedule(tx, payload, key=..., at=/delay=)`` and ``cancel(tx, key)`` are
        called inside the transaction that decides them. It runs in ``group`` (by
        default the app's group ``<app>-jobs``), with that group's retries."""
        check_name("job", name)

        def declare(function: Callable[[P, Tx, JobContext], Awaitable[None]]) -> Job[P]:
            owner = group or self._jobs_group()
            job: Job[P] = Job(name, payload, function, owner.name)
            if name in self.jobs:
                raise ValueError(f"app {self.name!r} declares job {name!r} twice")
            self.jobs[name] = job
            owner.jobs[name] = job
            return job

        return declare

    def _jobs_group(self) -> Group:
        name = f"{self.name}-jobs"
        return self.groups.get(name) or self.group(name)

    # The API and the schema ----------------------------------------------------------

    def route(
        self, method: str, path: str, *, doc: Doc, structs: Sequence[type] = ()
    ) -> Callable[[F], F]:
        """Declare an aiohttp view at ``method path`` with its OpenAPI operation ``doc``
        (and the Structs its ``$ref``s name), served by every API process."""

        def declare(view: F) -> F:
            self.add_routes([Route(method.upper(), path, view, doc, tuple(structs))])
            return view

        return declare

    def add_routes(self, routes: Sequence[Route]) -> None:
        """Routes declared as ``Route`` values, in their order. In the OpenAPI document
        each is in the app's group (its tag: the app's name, described by its
        ``description``) unless its operation names its own tags."""
        for route in routes:
            doc = route.doc if "tags" in route.doc else {"tags": [self.name], **route.doc}
            self.routes.append(dataclasses.replace(route, doc=doc))

    def api_context(self, context: ApiContext) -> ApiContext:
        """Declare an aiohttp ``cleanup_ctx`` of the API process: set up what the app's
        views share (a cache, a client) before ``yield``, release it after."""
        self.api_contexts.append(context)
        return context

    def migration(self, version: int, name: str, sql: str, *, replaces: Sequence[int] = ()) -> None:
        """Declare step ``version`` (1, 2, ...) of the app's own tables: DDL in SQLite's
        words (sluice says it in PostgreSQL's), applied once per database, in order,
        together with sluice's, one process at a time."""
        if any(m.version == version for m in self.migrations):
            raise ValueError(f"app {self.name!r} declares migration {version} twice")
        self.migrations.append(Migration(self.name, version, name, sql, tuple(replaces)))
