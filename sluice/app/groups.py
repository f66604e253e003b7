"""What an app's handler groups and projections declare (``App.group``,
``App.projection``): per-event functions or a batch handler and their settings, kept
apart from ``App`` so that each module stays one thing. ``sluice.app.running`` turns
them into what the engine runs."""

from __future__ import annotations

import copy
import re
from collections.abc import Awaitable, Callable, Container, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sluice.app.checks import SHAPES, check_projection_shape, check_shape
from sluice.app.contexts import D, HandlerContext, ProjectionContext
from sluice.app.jobs import Job
from sluice.events import Event
from sluice.flow.spec import Flow
from sluice.process.resources import Resources
from sluice.store import Tx
from sluice.streams.messages import Message
from sluice.streams.spec import DeadLetterHook

if TYPE_CHECKING:
    from sluice.app.declare import App

E = TypeVar("E", bound=Event)
T = TypeVar("T")

NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")

# A plain handler: an effect outside the database (a mail, a call), which must be
# idempotent by itself (key it by ``event.event_id``); the group retries it until it
# succeeds or goes to the dead letters.
OnHandler = Callable[[E, HandlerContext[D]], Awaitable[None]]
# A handler applied once: called inside a store transaction that also records the
# event as handled by the group, so its writes (and the events it appends) commit once
# whatever the redeliveries; a redelivery after the commit is acked without a call.
OnceHandler = Callable[[E, Tx, HandlerContext[D]], Awaitable[None]]
Handler = OnHandler[Any, Any]
# A batch handler: every event of a read that it handles, in the read's order; it
# returns the failed ones by event id (the others are acked).
BatchFunction = Callable[[Sequence[E], HandlerContext[D]], Awaitable[Mapping[str, BaseException]]]
# What a group's ``deps=`` is: called once per worker process as the group starts.
DepsFactory = Callable[[Resources], D]
# ``turns=``: the key by which the events of a read take turns.
TurnKey = Callable[[Any], Hashable]
# ``on_dead_letter`` may take the group's context too (its store, its deps).
DeadLetterWithContext = Callable[[Message, BaseException, HandlerContext[Any]], Awaitable[None]]
ProjectionApply = Callable[[Sequence[Any], Tx, ProjectionContext], Awaitable[None]]
ProjectionPayloads = Callable[[bytes | str, Tx, ProjectionContext], Awaitable[None]]
Publish = Callable[[Sequence[Any], Resources], Awaitable[None]]
Republish = Callable[[Resources], Awaitable[None]]


# The app that declared each event type, loaded or not: a handler that an app joined to
# another's group (the reminders app's ``mail_group.on(ReminderDue)``) belongs to the
# app of its event type, and runs only where that app is loaded.
EVENT_APPS: dict[type[Event], str] = {}


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


@dataclass(frozen=True)
class GroupRun(Generic[D]):
    """How a group runs beyond its settings (``App.group``'s ``deps``, ``turns``,
    ``on_dead_letter`` and ``flow``)."""

    deps: DepsFactory[D] | None = None
    turns: TurnKey | None = None
    on_dead_letter: DeadLetterHook | DeadLetterWithContext | None = None
    # Whether ``on_dead_letter`` takes ``ctx`` too.
    dead_letter_ctx: bool = False
    # Flow control by a key of each event (``App.group``'s ``flow``).
    flow: Flow | None = None


def checked_run(
    app: str,
    group: str,
    deps: DepsFactory[D] | None,
    turns: TurnKey | None,
    on_dead_letter: DeadLetterHook | DeadLetterWithContext | None,
    flow: Flow | None,
) -> GroupRun[D]:
    """``App.group``'s ``deps``, ``turns``, ``on_dead_letter`` and ``flow``, each checked,
    the error naming ``app`` and ``group``."""
    where = f"app {app!r}: group {group!r}"
    for what, value in (("deps", deps), ("turns", turns)):
        if value is not None and not callable(value):
            raise TypeError(f"{where}, {what}= must be a function, not {value!r}")
    if flow is not None and not isinstance(flow, Flow):
        raise TypeError(f"{where}, flow= must be a Flow, not {flow!r}")
    with_ctx = False
    if on_dead_letter is not None:
        what = f"group {group!r}, on_dead_letter"
        try:  # the shape with ``ctx`` first; the error names the shape without it
            check_shape(app, what, on_dead_letter, SHAPES["on_dead_letter_ctx"])
            with_ctx = True
        except TypeError:
            check_shape(app, what, on_dead_letter, SHAPES["on_dead_letter"])
    return GroupRun(deps, turns, on_dead_letter, with_ctx, flow)


class Group(Generic[D]):
    """A handler group: functions per event type, consumed by ``sluice worker NAME`` with
    competing consumers, retries with backoff, and dead letters after the last attempt.
    ``D``: what its ``deps=`` factory returns (``ctx.deps``), None without one."""

    def __init__(
        self, app: App, name: str, settings: GroupSettings, run: GroupRun[D] | None = None
    ) -> None:
        self.app = app
        self.name = check_name("group", name)
        self.settings = settings
        self.run: GroupRun[D] = run or GroupRun()
        self.handlers: dict[type[Event], Handler] = {}
        self.once_handlers: dict[type[Event], OnceHandler[Any, Any]] = {}
        self.batch_types: tuple[type[Event], ...] = ()
        self.batch_function: BatchFunction[Any, D] | None = None
        self.jobs: dict[str, Job[Any]] = {}

    @property
    def on_dead_letter(self) -> DeadLetterHook | DeadLetterWithContext | None:
        """What the group calls once one of its entries went to the dead letters."""
        return self.run.on_dead_letter

    def on(self, event_type: type[E]) -> Callable[[OnHandler[E, D]], OnHandler[E, D]]:
        """Declare ``async def handler(event, ctx)`` for ``event_type``: an effect outside
        the database, retried until it succeeds (make it idempotent by the event's id)."""
        return self._declare(event_type, "on", self.handlers)

    def once(self, event_type: type[E]) -> Callable[[OnceHandler[E, D]], OnceHandler[E, D]]:
        """Declare ``async def handler(event, tx, ctx)`` for ``event_type``, applied exactly
        once: ``tx`` commits the handler's writes (and the events it appends) together
        with the record that this group handled the event."""
        return self._declare(event_type, "once", self.once_handlers)

    def batch(self, *event_types: type[E]) -> Callable[[BatchFunction[E, D]], BatchFunction[E, D]]:
        """Declare ``async def handle(events, ctx)``, the group's one handler: it gets
        every event of ``event_types`` a read brought (in the read's order, events of
        other types are acked without a call) and returns the failed ones as a mapping
        of event id to exception; those are retried (or dead-lettered) one by one, the
        others acked. An exception it raises fails the whole read."""
        where = f"app {self.app.name!r}: group {self.name!r}"
        if self.batch_function is not None:
            raise ValueError(f"{where} declares @batch twice: a group has one batch handler")
        if self.handlers or self.once_handlers or self.run.turns is not None:
            raise ValueError(
                f"{where}: @batch is the group's only handler: it takes no @on, @once nor"
                " turns= (declare another group for them)"
            )
        if not event_types:
            raise ValueError(f"{where}: @batch() names no event type")

        def declare(function: BatchFunction[E, D]) -> BatchFunction[E, D]:
            kinds = ", ".join(t.__name__ for t in event_types)
            check_shape(
                self.app.name, f"group {self.name!r}, @batch({kinds})", function, SHAPES["batch"]
            )
            self.batch_types, self.batch_function = tuple(event_types), function
            return function

        return declare

    def _declare(
        self, event_type: type[Event], kind: str, into: dict[type[Event], Any]
    ) -> Callable[[T], T]:
        """The decorator of ``kind``: checks the function's shape, then keeps it."""
        if self.batch_function is not None:
            raise ValueError(
                f"app {self.app.name!r}: group {self.name!r} has a @batch handler, its only"
                f" one: @{kind}({event_type.__name__}) belongs in another group"
            )
        if event_type in self.handlers or event_type in self.once_handlers:
            raise ValueError(f"group {self.name!r} handles {event_type.__name__} twice")

        def declare(function: T) -> T:
            what = f"group {self.name!r}, @{kind}({event_type.__name__})"
            check_shape(self.app.name, what, function, SHAPES[kind])
            into[event_type] = function
            return function

        return declare

    @property
    def event_types(self) -> tuple[type[Event], ...]:
        """The event types the group has a handler for (``on``, ``once`` and ``batch``)."""
        return (*self.handlers, *self.once_handlers, *self.batch_types)

    def loaded_part(self, apps: Container[str]) -> Group[D]:
        """The group as a deployment of ``apps`` runs it: without the handlers joined for
        the event types of an app it does not load (their events never come)."""
        gone = {t for t in self.event_types if t in EVENT_APPS and EVENT_APPS[t] not in apps}
        if not gone:
            return self
        part = copy.copy(self)
        part.handlers = {t: f for t, f in self.handlers.items() if t not in gone}
        part.once_handlers = {t: f for t, f in self.once_handlers.items() if t not in gone}
        part.batch_types = tuple(t for t in self.batch_types if t not in gone)
        return part


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
    replaces_migrations: tuple[tuple[int, ...], ...] = ()
    apply_function: ProjectionApply | None = None
    payloads_function: ProjectionPayloads | None = None
    publish_function: Publish | None = None
    republish_function: Republish | None = None

    def apply(self, function: ProjectionApply) -> ProjectionApply:
        """Declare ``async def apply(events, tx, ctx)``: the effect of a batch of events
        not applied before, written with ``tx`` into ``ctx.table(name)`` (the live table,
        or the one a replay is building)."""
        self.apply_function = self._checked(function, "apply")
        return function

    def apply_payloads(self, function: ProjectionPayloads) -> ProjectionPayloads:
        """Optional, for speed: ``async def apply(payloads, tx, ctx)`` takes the stored
        payloads of a replay's chunk as one JSON array, in no guaranteed order."""
        self.payloads_function = self._checked(function, "apply_payloads")
        return function

    def publish(self, function: Publish) -> Publish:
        """Optional: ``async def publish(events, resources)`` writes derived state outside
        the database (absolute values: it may run again for the same events)."""
        self.publish_function = self._checked(function, "publish")
        return function

    def republish(self, function: Republish) -> Republish:
        """Optional: ``async def republish(resources)`` rewrites that state after a replay."""
        self.republish_function = self._checked(function, "republish")
        return function

    def _checked(self, function: Any, kind: str) -> Any:
        """``function``, checked; one in release 3's order, with its first two swapped."""
        what = f"projection {self.name!r}, @{kind}"
        if check_projection_shape(self.app.name, what, function, kind):
            return _swapped(function)
        return function

    @property
    def processed_table(self) -> str:
        """The table where the projection records each event it applied (its dedupe
        record, written in the same transaction as the projection's rows)."""
        return f"{self.name.replace('-', '_')}_processed"


def _swapped(function: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """A function declared in release 3's order, called in this release's."""

    async def swapped(first: Any, second: Any, *rest: Any) -> None:
        await function(second, first, *rest)

    return swapped
