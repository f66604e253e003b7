"""The event types a process knows, and the one codec that decodes them all.

Every event is a tagged ``msgspec.Struct`` whose tag is its class name, the ``type``
stored beside its payload in the history and on every stream entry. The types are
registered by their owner, sluice itself or an app (``sluice.app``), with the
aggregates they are published on and the field naming each aggregate's id (its
partition key). A name registered twice by two owners is refused, naming both, so two
apps can never read each other's events as their own.

Versions: the ``v`` field of the envelope is the version an event was written at, and
its class's default for ``v`` is the current one. An event type whose shape changed
registers an upcaster for each older version (a function from the payload of version
``n``, as a dict, to the payload of ``n + 1``); a payload older than its class is
brought up through them before it is decoded, so a replay of a history written at
version 1 builds what version 2 expects. The fast path is untouched: one decode into
the union, then one comparison of ``v`` for the types that have upcasters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import msgspec

# An event as a plain dict, as an upcaster receives and returns it.
Payload = dict[str, Any]
Upcaster = Callable[[Payload], Payload]

E = TypeVar("E", bound=msgspec.Struct)


class RegistryError(ValueError):
    """Event types that cannot be registered together; the message names the owners."""


class UndeclaredEvent(TypeError):
    """An event of a type no loaded app declares, refused where it is appended: nothing
    could ever read it back (docs/guides/write-an-app.md, "What is checked, and when")."""


class _Header(msgspec.Struct):
    """What an upcast needs first: the type and the version a payload was written at."""

    type: str
    v: int = 1


class Registry(Generic[E]):
    """Event types by name, their owners, aggregates and upcasters; one decoder of all."""

    def __init__(self, base: type[E]) -> None:
        self.base = base
        self.types: dict[str, type[E]] = {}  # live: callers keep a reference to it
        self.aggregates: dict[str, str] = {}  # aggregate -> its id field; live as well
        self.owners: dict[str, str] = {}  # event type -> owner
        self._aggregate_owners: dict[str, str] = {}
        self._upcasters: dict[type[E], dict[int, Upcaster]] = {}
        self._current: dict[type[E], int] = {}
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(base)

    def check(
        self,
        owner: str,
        types: Iterable[type[E]],
        aggregates: Mapping[str, str],
        upcasters: Mapping[type[E], Mapping[int, Upcaster]] | None = None,
        *,
        taken: Mapping[str, str] | None = None,
        known: Mapping[str, str] | None = None,
    ) -> None:
        """Raise ``RegistryError`` if ``owner``'s types cannot join the registry; registers
        nothing. When several owners are checked before any is registered, ``taken``
        holds the type names of those checked before (name -> owner) and ``known`` their
        aggregates (aggregate -> id field)."""
        taken = {**self.owners, **(taken or {})}
        known_aggregates = {**self.aggregates, **(known or {}), **aggregates}
        declared = {**self.aggregates, **(known or {})}
        for aggregate, field in aggregates.items():
            if declared.get(aggregate, field) != field:
                raise RegistryError(
                    f"aggregate {aggregate!r}: {owner} keys it by {field!r}, another owner"
                    f" ({self._aggregate_owners.get(aggregate, 'an app loaded before')}) by"
                    f" {declared[aggregate]!r}"
                )
        for cls in types:
            name = cls.__name__
            tag = cls.__struct_config__.tag
            if not (isinstance(cls, type) and issubclass(cls, self.base)) or tag != name:
                raise RegistryError(
                    f"{owner}: {cls!r} is not an event: subclass sluice.app.Event with"
                    " frozen=True, kw_only=True, tag=True (its tag is its class name)"
                )
            other = taken.get(name)
            if other is not None and other != owner:  # the same owner again: a reload
                raise RegistryError(
                    f"event type {name!r} is declared by {other} and by {owner}: event type"
                    " names are shared by every app of a deployment; rename one"
                )
            aggregate = str(getattr(cls, "aggregate", ""))
            if aggregate not in known_aggregates:
                raise RegistryError(
                    f"{owner}: {name}.aggregate is {aggregate!r}, which no app declares"
                    f" (known: {', '.join(sorted(known_aggregates))})"
                )
            field = known_aggregates[aggregate]
            if field not in cls.__struct_fields__:
                raise RegistryError(
                    f"{owner}: {name} has no field {field!r}, the id of its aggregate"
                    f" {aggregate!r} (the partition of its stream comes from it)"
                )
            self._check_versions(owner, cls, (upcasters or {}).get(cls, {}))

    def _check_versions(self, owner: str, cls: type[E], upcasters: Mapping[int, Upcaster]) -> None:
        current = current_version(cls)
        missing = [n for n in range(1, current) if n not in upcasters]
        extra = [n for n in upcasters if not 1 <= n < current]
        if missing or extra:
            raise RegistryError(
                f"{owner}: {cls.__name__} is at version {current}: it needs an upcaster from"
                f" each of versions 1..{current - 1} (missing {missing}, beyond it {extra})"
            )

    def register(
        self,
        owner: str,
        types: Iterable[type[E]],
        aggregates: Mapping[str, str],
        upcasters: Mapping[type[E], Mapping[int, Upcaster]] | None = None,
    ) -> None:
        """Add ``owner``'s types; registering them again (a module imported anew) replaces
        them."""
        types = tuple(types)
        self.check(owner, types, aggregates, upcasters)
        for aggregate, field in aggregates.items():
            self.aggregates.setdefault(aggregate, field)
            self._aggregate_owners.setdefault(aggregate, owner)
        for cls in types:
            self.types[cls.__name__] = cls
            self.owners[cls.__name__] = owner
            ups = dict((upcasters or {}).get(cls, {}))
            if ups:
                self._upcasters[cls] = ups
                self._current[cls] = current_version(cls)
        union: Any = tuple(self.types.values())
        self._decoder = msgspec.json.Decoder(union[0] if len(union) == 1 else _union(union))

    def undeclared(self, cls: type[Any]) -> UndeclaredEvent:
        """The error for an event of ``cls``, whose type (its name) is not registered:
        what the append refuses, why, and which app should declare it."""
        name = getattr(cls, "__name__", repr(cls))
        where = f"{cls.__module__}.{cls.__qualname__}"
        aggregate = str(getattr(cls, "aggregate", ""))
        owner = self._aggregate_owners.get(aggregate)
        hint = (
            f"declare it with @app.event in app {owner!r}, whose aggregate {aggregate!r} it"
            " is published on"
            if owner is not None
            else "declare it with @app.event in the app that owns it, and name that app in"
            " SLUICE_APPS"
        )
        return UndeclaredEvent(
            f"event type {name} ({where}) is declared by no loaded app, so nothing could"
            f" read it back; nothing of this transaction is committed: {hint}"
        )

    def decode(self, data: bytes | str) -> E:
        try:
            event: E = self._decoder.decode(data)
        except msgspec.ValidationError:
            if not self._upcasters:
                raise
            return self._upcast(data)  # an older shape that no longer fits its class
        if self._upcasters and event.v < self._current.get(type(event), 0):  # type: ignore[attr-defined]
            return self._upcast(data)
        return event

    def _upcast(self, data: bytes | str) -> E:
        header = msgspec.json.decode(data, type=_Header)
        cls = self.types.get(header.type)
        ups = self._upcasters.get(cls) if cls is not None else None
        if cls is None or ups is None or header.v >= self._current[cls]:
            event: E = self._decoder.decode(data)  # raises what it raised
            return event
        payload: Payload = msgspec.json.decode(data)
        for version in range(header.v, self._current[cls]):
            payload = ups[version](payload)
        payload["type"], payload["v"] = header.type, self._current[cls]
        upcast: E = msgspec.json.decode(msgspec.json.encode(payload), type=cls)
        return upcast


def current_version(cls: type[msgspec.Struct]) -> int:
    """The default of ``v``: the version events of ``cls`` are written at now."""
    for field in msgspec.structs.fields(cls):
        if field.name == "v" and isinstance(field.default, int):
            return field.default
    return 1


def _union(types: tuple[type, ...]) -> Any:
    union: Any = types[0]
    for cls in types[1:]:
        union = union | cls
    return union
