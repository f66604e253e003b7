"""What an app's handler groups and projections declare (``App.group``,
``App.projection``): per-event functions and their settings, kept apart from ``App``
so that each module stays one thing. ``sluice.app.running`` turns them into what the
engine runs."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sluice.app.contexts import HandlerContext, ProjectionContext
from sluice.app.jobs import Job
from sluice.events import Event
from sluice.resources import Resources
from sluice.store import Tx
from sluice.streams.spec import DeadLetterHook

if TYPE_CHECKING:
    from sluice.app.declare import App

E = TypeVar("E", bound=Event)
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
        """The event types the group has a handler for (``on`` and ``once``)."""
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
        """The table where the projection records each event it applied (its dedupe
        record, written in the same transaction as the projection's rows)."""
        return f"{self.name.replace('-', '_')}_processed"
