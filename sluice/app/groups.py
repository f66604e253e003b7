"""What an app's handler groups and projections declare (``App.group``,
``App.projection``): per-event functions and their settings, kept apart from ``App``
so that each module stays one thing. ``sluice.app.running`` turns them into what the
engine runs."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sluice.app.checks import SHAPES, check_projection_shape, check_shape
from sluice.app.contexts import HandlerContext, ProjectionContext
from sluice.app.jobs import Job
from sluice.events import Event
from sluice.process.resources import Resources
from sluice.store import Tx
from sluice.streams.spec import DeadLetterHook, GroupSpec

if TYPE_CHECKING:
    from sluice.app.declare import App

E = TypeVar("E", bound=Event)
T = TypeVar("T")
# A batch group's handler: ``async def handler(event, deps)``, ``deps`` being what the
# group's owner hands its handlers.
B = TypeVar("B", bound=Callable[..., Awaitable[None]])

NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")

# A plain handler: an effect outside the database (a mail, a call), which must be
# idempotent by itself (key it by ``event.event_id``); the group retries it until it
# succeeds or goes to the dead letters.
OnHandler = Callable[[E, HandlerContext], Awaitable[None]]
# A handler applied once: called inside a store transaction that also records the
# event as handled by the group, so its writes (and the events it appends) commit once
# whatever the redeliveries; a redelivery after the commit is acked without a call.
OnceHandler = Callable[[E, Tx, HandlerContext], Awaitable[None]]
Handler = OnHandler[Any]
ProjectionApply = Callable[[Sequence[Any], Tx, ProjectionContext], Awaitable[None]]
ProjectionPayloads = Callable[[bytes | str, Tx, ProjectionContext], Awaitable[None]]
Publish = Callable[[Sequence[Any], Resources], Awaitable[None]]
Republish = Callable[[Resources], Awaitable[None]]


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
        self.once_handlers: dict[type[Event], OnceHandler[Any]] = {}
        self.jobs: dict[str, Job[Any]] = {}

    def on(self, event_type: type[E]) -> Callable[[OnHandler[E]], OnHandler[E]]:
        """Declare ``async def handler(event, ctx)`` for ``event_type``: an effect outside
        the database, retried until it succeeds (make it idempotent by the event's id)."""
        return self._declare(event_type, "on", self.handlers)

    def once(self, event_type: type[E]) -> Callable[[OnceHandler[E]], OnceHandler[E]]:
        """Declare ``async def handler(event, tx, ctx)`` for ``event_type``, applied exactly
        once: ``tx`` commits the handler's writes (and the events it appends) together
        with the record that this group handled the event."""
        return self._declare(event_type, "once", self.once_handlers)

    def _declare(
        self, event_type: type[Event], kind: str, into: dict[type[Event], Any]
    ) -> Callable[[T], T]:
        """The decorator of ``kind``: checks the function's shape, then keeps it."""
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
        """The event types the group has a handler for (``on`` and ``once``)."""
        return (*self.handlers, *self.once_handlers)


class BatchGroup:
    """A group whose handler gets every delivery of a read and answers their outcomes
    (advanced: ``build(resources)`` returns the engine's ``GroupSpec``), declared by
    ``App.batch_group``. Its owner decides what its handlers are handed; any app that
    requires the owner joins the group with ``@group.handler(EventType)`` (the reminders
    app's mail, in the accounts app's ``mail`` group)."""

    def __init__(
        self,
        app: App,
        name: str,
        aggregates: Sequence[str],
        build: Callable[[Resources], GroupSpec],
    ) -> None:
        self.app = app
        self.name = check_name("group", name)
        self.aggregates = tuple(aggregates)
        self.build = build
        self.handlers: dict[type[Event], Callable[..., Awaitable[None]]] = {}

    def handler(self, event_type: type[Event]) -> Callable[[B], B]:
        """Declare ``async def handler(event, deps)`` for ``event_type`` in this group,
        ``deps`` being what the group's owner documents; one handler per event type."""
        if event_type in self.handlers:
            raise ValueError(f"group {self.name!r} handles {event_type.__name__} twice")

        def declare(function: B) -> B:
            self.handlers[event_type] = function
            return function

        return declare


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
