"""Event-sourced aggregates: state folded from an aggregate's own events, saved with
optimistic concurrency, loaded from the newest snapshot and the events after it.

An ``Aggregate`` subclass names the aggregate type its events carry (the app's declared
``aggregate``), declares its state as annotated fields with defaults, and one
``@applies(EventType)`` method per event type, which changes the state and nothing
else. A command method checks the state and ``record``s new events; recording applies
them at once, so the state is always the fold of every event, saved or not::

    class Order(Aggregate):
        aggregate = "orders"
        status: str = "new"

        @applies(OrderPlaced)
        def _placed(self, event: OrderPlaced) -> None:
            self.status = "placed"

        def place(self, total: int) -> None:
            if self.status != "new":
                raise Conflict(f"order {self.id} is {self.status}")
            self.record(OrderPlaced(order_id=self.id, total=total))

    async with store(request).transaction() as tx:
        order = await Order.load(tx, order_id)  # NotFound when it has no events
        order.pay(amount)
        await order.save(tx)

**Save** appends the new events through the outbox like any other (streams, groups,
projections and replay see them unchanged) and, in the same transaction, one row per
event in ``aggregate_events``, keyed by (aggregate type, id, version). The database's
key is the concurrency check: of two transactions that loaded version n and save, the
second finds version n+1 taken and raises ``VersionConflict`` (a ``Conflict``, 409
through the API), with nothing of its own written. ``retry_on_conflict`` runs a command
again in a fresh transaction where that is what the caller wants.

**Snapshots** are an optimisation, never the truth: every ``snapshot_every`` events (a
class attribute; 0 turns them off; a deployment's ``SLUICE_SNAPSHOT_EVERY`` overrides it
per aggregate type, handed down with the store) the save that crosses the interval
stores the state in ``aggregate_snapshots``, in its transaction. A load starts from the
snapshot when it was taken by the same class, with the same state fields and
``state_version``, under the same schema versions of the event types it applies (so a
changed upcaster chain, which comes with a new version, sets it aside); otherwise it
folds every event and the next save stores a fresh snapshot. Deleting every snapshot
changes no result. Bump ``state_version`` when an apply computes differently: older
snapshots are then ignored.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import typing
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Self, TypeVar

import msgspec

from sluice.errors import Conflict, NotFound
from sluice.events import AGGREGATES, Event, decode
from sluice.events.registry import current_version
from sluice.store import Store, Tx

A = TypeVar("A", bound="Aggregate")
E = TypeVar("E", bound=Event)
T = TypeVar("T")

Apply = Callable[[A, E], None]
_MARK = "__sluice_applies__"
_BASE_FIELDS = frozenset({"id", "version"})


class VersionConflict(Conflict):
    """The aggregate moved on since it was loaded: another transaction saved its next
    version first. Load it again and decide again (``retry_on_conflict``)."""


def applies(event_type: type[E]) -> Callable[[Apply[A, E]], Apply[A, E]]:
    """Declare the method that folds ``event_type`` into the aggregate's state:
    ``def _placed(self, event: OrderPlaced) -> None``. Typed: mypy refuses a method whose
    event parameter is another type."""

    def mark(function: Apply[A, E]) -> Apply[A, E]:
        setattr(function, _MARK, event_type)
        return function

    return mark


class Aggregate:
    """The base of an event-sourced aggregate (see the module docstring)."""

    # The aggregate type of its events (``Event.aggregate``): set by the subclass.
    aggregate: ClassVar[str]
    # Events between two snapshots; 0: none.
    snapshot_every: ClassVar[int] = 100
    # The version of the state's shape and fold: bump it when either changes.
    state_version: ClassVar[int] = 1

    _appliers: ClassVar[dict[type[Event], Callable[[Any, Any], None]]] = {}
    _fields: ClassVar[tuple[tuple[str, Any, Any], ...] | None] = None
    _state_type: ClassVar[type[msgspec.Struct] | None] = None

    id: str
    version: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own: dict[type[Event], Callable[[Any, Any], None]] = {}
        for value in vars(cls).values():
            event_type = getattr(value, _MARK, None)
            if event_type is None:
                continue
            if event_type in own:
                raise TypeError(f"{cls.__name__} applies {event_type.__name__} twice")
            own[event_type] = value
        appliers = {**cls._appliers, **own}
        aggregate = getattr(cls, "aggregate", None)
        for event_type in appliers:
            if aggregate is not None and event_type.aggregate != aggregate:
                raise TypeError(
                    f"{cls.__name__} (aggregate {aggregate!r}) applies"
                    f" {event_type.__name__}, an event of aggregate {event_type.aggregate!r}"
                )
        cls._appliers = appliers
        cls._fields = None
        cls._state_type = None

    def __init__(self, aggregate_id: str) -> None:
        """A new aggregate, at version 0: nothing saved yet (use ``load`` for one that
        exists)."""
        self.id = aggregate_id
        self.version = 0
        self._saved = 0
        self._pending: list[Event] = []
        self._snapshot_due = False  # none fits: the next save takes one
        for name, _, default in self._state_fields():
            setattr(self, name, _fresh(default))

    # State ---------------------------------------------------------------------------

    @classmethod
    def _state_fields(cls) -> tuple[tuple[str, Any, Any], ...]:
        """(name, type, default) of each state field, from the class's annotations."""
        if cls._fields is None:
            hints = typing.get_type_hints(cls)
            fields = []
            for name, hint in hints.items():
                if name in _BASE_FIELDS or name.startswith("_"):
                    continue
                if typing.get_origin(hint) is ClassVar or hint is ClassVar:
                    continue
                if not hasattr(cls, name):
                    raise TypeError(f"{cls.__name__}.{name}: a state field needs a default")
                fields.append((name, hint, getattr(cls, name)))
            cls._fields = tuple(fields)
        return cls._fields

    @classmethod
    def _state_struct(cls) -> type[msgspec.Struct]:
        if cls._state_type is None:
            cls._state_type = msgspec.defstruct(
                f"{cls.__name__}State",
                [
                    (name, hint, msgspec.field(default_factory=_factory(default)))
                    for name, hint, default in cls._state_fields()
                ],
            )
        return cls._state_type

    def state(self) -> dict[str, Any]:
        """The state fields and their values (what a snapshot keeps)."""
        return {name: getattr(self, name) for name, _, _ in self._state_fields()}

    # Events --------------------------------------------------------------------------

    def record(self, event: Event) -> None:
        """Apply a new event to the state and keep it for ``save``: the one way a command
        changes the aggregate."""
        field = AGGREGATES.get(type(self).aggregate)
        if field is not None and getattr(event, field, None) != self.id:
            raise ValueError(
                f"{type(self).__name__} {self.id!r} records {type(event).__name__} whose"
                f" {field} is {getattr(event, field, None)!r}"
            )
        self._apply(event)
        self._pending.append(event)

    def _apply(self, event: Event) -> None:
        function = self._appliers.get(type(event))
        if function is None:
            raise TypeError(f"{type(self).__name__} has no @applies({type(event).__name__}) method")
        function(self, event)
        self.version += 1

    @property
    def pending(self) -> tuple[Event, ...]:
        """The events recorded since the last load or save."""
        return tuple(self._pending)

    # Load and save --------------------------------------------------------------------

    @classmethod
    async def find(cls, db: Tx | Store, aggregate_id: str) -> Self | None:
        """The aggregate ``aggregate_id`` folded from its history (from its snapshot when one
        fits), or None when it has no event."""
        aggregate = cls(aggregate_id)
        snapshot = await db.fetchone(
            "SELECT version, state_version, schema, state FROM aggregate_snapshots"
            " WHERE aggregate = ? AND aggregate_id = ?",
            (cls.aggregate, aggregate_id),
        )
        state = None
        if snapshot is not None and (snapshot[1], snapshot[2]) == (
            cls.state_version,
            cls._schema(),
        ):
            try:
                state = msgspec.json.decode(snapshot[3], type=cls._state_struct())
            except msgspec.DecodeError:  # ValidationError too: set aside, as a stale one
                state = None
        if state is None or snapshot is None:
            snapshot = None
        else:
            for name, _, _ in cls._state_fields():
                setattr(aggregate, name, getattr(state, name))
            aggregate.version = int(snapshot[0])
        start = aggregate.version
        rows = await db.fetchall(
            "SELECT a.version, e.payload FROM aggregate_events a"
            " JOIN events e ON e.event_id = a.event_id"
            " WHERE a.aggregate = ? AND a.aggregate_id = ? AND a.version > ?"
            " ORDER BY a.version",
            (cls.aggregate, aggregate_id, start),
        )
        for version, payload in rows:
            if int(version) != aggregate.version + 1:
                raise RuntimeError(
                    f"{cls.__name__} {aggregate_id!r}: version {aggregate.version + 1} is missing"
                    " from the events table"
                )
            aggregate._apply(decode(payload))
        if aggregate.version == 0:
            return None
        aggregate._saved = aggregate.version
        # None fitted (set aside, or never taken): the next save takes one, so a load
        # stays a read.
        every = cls._every(db)
        aggregate._snapshot_due = snapshot is None and 0 < every <= aggregate.version
        return aggregate

    @classmethod
    async def load(cls, db: Tx | Store, aggregate_id: str) -> Self:
        """``find``, raising ``NotFound`` when the aggregate has no event."""
        aggregate = await cls.find(db, aggregate_id)
        if aggregate is None:
            raise NotFound(f"no {cls.__name__.lower()} {aggregate_id}")
        return aggregate

    @classmethod
    async def ids(cls, db: Tx | Store) -> list[str]:
        """The id of every aggregate of this type that has saved events, in id order."""
        rows = await db.fetchall(
            "SELECT aggregate_id FROM aggregate_events WHERE aggregate = ? AND version = 1"
            " ORDER BY aggregate_id",
            (cls.aggregate,),
        )
        return [str(row[0]) for row in rows]

    async def save(self, tx: Tx) -> None:
        """Append the recorded events in ``tx``, each at its version; ``VersionConflict``
        (nothing of them written) when another transaction saved a version first."""
        await save_all(tx, self)

    @classmethod
    def _every(cls, db: Tx | Store) -> int:
        """Events between two snapshots: the deployment's SLUICE_SNAPSHOT_EVERY for this
        aggregate type (handed down with the store), else the class's."""
        return db.snapshot_every.get(cls.aggregate, cls.snapshot_every)

    def _snapshot_row(self, tx: Tx) -> tuple[Any, ...] | None:
        """The snapshot this save stores, if it crosses an interval (or none fitted)."""
        every = self._every(tx)
        if not every or not (self._snapshot_due or self._saved // every != self.version // every):
            return None
        state = self._state_struct()(**self.state())
        kind = type(self).aggregate
        return (
            kind,
            self.id,
            self.version,
            self.state_version,
            self._schema(),
            msgspec.json.encode(state),
        )

    @classmethod
    def _schema(cls) -> str:
        """What a snapshot must have been taken under to be trusted, in short: this class
        (another class of the same aggregate type keeps other state), its state fields
        and the schema versions of the event types it applies (another upcaster chain)."""
        fields = [f"{name}:{hint!r}" for name, hint, _ in cls._state_fields()]
        events = sorted(f"{t.__name__}:{current_version(t)}" for t in cls._appliers)
        parts = [f"{cls.__module__}.{cls.__qualname__}", *fields, *events]
        return hashlib.sha256(",".join(parts).encode()).hexdigest()[:16]


_VERSION_COLUMNS = ("aggregate", "aggregate_id", "version", "event_id")
_SNAPSHOT_COLUMNS = ("aggregate", "aggregate_id", "version", "state_version", "schema", "state")
_DELETE_CHUNK = 300  # event ids per DELETE: far below SQLite's bound on parameters


async def save_all(tx: Tx, *aggregates: Aggregate) -> None:
    """Save ``aggregates`` in ``tx`` at about the cost of one: one insert of all their
    versions, one append of all their events, one write of the snapshots due.
    ``VersionConflict`` when any of them moved on, with nothing of any written."""
    changed = [a for a in aggregates if a._pending]
    if not changed:
        return
    rows = [
        (type(a).aggregate, a.id, a._saved + n, event.event_id)
        for a in changed
        for n, event in enumerate(a._pending, start=1)
    ]
    inserted = await tx.insert_new("aggregate_events", _VERSION_COLUMNS, rows, "event_id")
    if len(inserted) != len(rows):
        got = {str(row[0]) for row in inserted}
        # Give back what was inserted, so a swallowed conflict commits none of it.
        ids = [event_id for event_id in (row[3] for row in rows) if event_id in got]
        for start in range(0, len(ids), _DELETE_CHUNK):
            chunk = ids[start : start + _DELETE_CHUNK]
            await tx.execute(
                f"DELETE FROM aggregate_events WHERE event_id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
        late = next(a for a in changed if any(e.event_id not in got for e in a._pending))
        raise VersionConflict(
            f"{type(late).__name__.lower()} {late.id} moved on from version {late._saved}:"
            " load it again"
        )
    await tx.append(*(event for a in changed for event in a._pending))
    snapshots = {(row[0], row[1]): row for a in changed if (row := a._snapshot_row(tx))}
    if snapshots:
        await tx.upsert_rows(
            "aggregate_snapshots",
            _SNAPSHOT_COLUMNS,
            [snapshots[key] for key in sorted(snapshots)],
            keys=("aggregate", "aggregate_id"),
            replace=("version", "state_version", "schema", "state"),
        )
    for a in changed:
        a._pending.clear()
        a._saved = a.version
        a._snapshot_due = False


async def retry_on_conflict(
    store: Store,
    command: Callable[[Tx], Awaitable[T]],
    *,
    attempts: int = 5,
    base_delay_s: float = 0.01,
) -> T:
    """Run ``command(tx)`` in a transaction of its own, again (after a short jittered
    wait) each time it raises ``VersionConflict``, at most ``attempts`` times; the last
    conflict is raised. Other errors (a command's own ``Conflict`` among them) are not
    retried."""
    for attempt in range(1, attempts + 1):
        try:
            async with store.transaction() as tx:
                return await command(tx)
        except VersionConflict:
            if attempt == attempts:
                raise
            await asyncio.sleep(random.uniform(0, base_delay_s * 2**attempt))
    raise AssertionError("unreachable")


def _fresh(default: Any) -> Any:
    """A state field's default for a new aggregate: mutable ones copied, never shared."""
    return default.copy() if isinstance(default, list | dict | set) else default


def _factory(default: Any) -> Callable[[], Any]:
    return lambda: _fresh(default)


__all__ = ["Aggregate", "VersionConflict", "applies", "retry_on_conflict", "save_all"]
