"""What a test reads of a deployment, without a word of SQL about sluice's own tables:
the event history, what a group handled, the dead letters.

``open_deployment(config)`` opens the deployment's store (migrated, as a process's first
start does) and Redis, with the apps of ``config`` loaded, so the test process encodes
and decodes their events as the deployment's processes do. The in-process ``Harness``
reads the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, overload

import redis.asyncio as aioredis

from sluice.app.assembly import assemble
from sluice.app.loading import Apps
from sluice.config import Config
from sluice.events import Event, decode
from sluice.process.resources import Resources
from sluice.records.dead_letters import DeadLetter, list_dead_letters
from sluice.store import Store

CHUNK = 500  # event ids per query
E = TypeVar("E", bound=Event)


class Deployment:
    """A deployment as its tests read it: ``config``, its ``store`` (``sluice.app.Store``:
    a test may write rows and append events as a view does), its ``redis``, and the
    readers below."""

    def __init__(self, resources: Resources, apps: Apps) -> None:
        self.resources = resources
        self.apps = apps

    @property
    def config(self) -> Config:
        """The deployment's configuration."""
        return self.resources.config

    @property
    def store(self) -> Store:
        """The deployment's store, migrated, with the apps' tables."""
        return self.resources.store

    @property
    def redis(self) -> aioredis.Redis:
        """The deployment's Redis client."""
        return self.resources.redis

    @overload
    async def events(self, kind: type[E], /) -> list[E]: ...
    @overload
    async def events(self, *types: type[Event] | str) -> list[Event]: ...

    async def events(self, *types: type[Event] | str) -> Sequence[Event]:
        """The events of the history, oldest first, as the deployment's processes decode
        them (older versions brought up to the current one by their upcasters); only
        those of ``types`` (classes or type names) if any are given."""
        names = _names(types)
        where = f" WHERE type IN ({', '.join('?' for _ in names)})" if names else ""
        rows = await self.store.fetchall(f"SELECT payload FROM events{where} ORDER BY seq", names)
        return [decode(bytes(row[0])) for row in rows]

    @overload
    async def handled(self, group: str, kind: type[E], /) -> list[E]: ...
    @overload
    async def handled(self, group: str, *types: type[Event] | str) -> list[Event]: ...

    async def handled(self, group: str, *types: type[Event] | str) -> Sequence[Event]:
        """The events ``group`` handled, each once, oldest first (only those of ``types``,
        if any are given): for a ``once`` handler or a job, those whose effect committed
        (with the group's record that it handled them); for a projection, those applied
        to its tables; for an ``on`` handler, those its call returned for (an attempt
        recorded as handled); for a ``batch`` handler, those it did not name failed.
        Events of types the group has no handler for are not listed, though the group
        reads and acks them."""
        if group not in self.apps.groups:
            known = ", ".join(sorted(self.apps.groups))
            raise ValueError(f"no group {group!r} in this deployment; its groups: {known}")
        ids = await self._column("SELECT event_id FROM handled_events WHERE group_name = ?", group)
        projection = self.apps.projections.get(group)
        if projection is not None:
            ids |= await self._column(f"SELECT event_id FROM {projection.processed_table}")
            ids |= await self._rebuilt(projection.watermark, projection.event_types)
        on_types = self._on_types(group)
        if on_types is not None:
            delivered = await self._column(
                "SELECT event_id FROM deliveries WHERE group_name = ? AND outcome = 'handled'",
                group,
            )
            ids |= await self._of_types(delivered, on_types)
        wanted = set(_names(types))
        found = await self._events_by_id(ids)
        return [e for e in found if type(e).__name__ in wanted] if wanted else found

    async def dead_letters(self, *groups: str) -> list[DeadLetter]:
        """The dead letters of ``groups`` (of every group if none is named), the latest
        failure first: each with its event's id and type, deliveries and last error."""
        names = groups or tuple(self.apps.groups)
        keys = self.resources.keys
        return await list_dead_letters(self.redis, keys, names, limit=10_000)

    def _on_types(self, group: str) -> set[str] | None:
        """The event types of ``group``'s ``on`` and ``batch`` handlers (whose handled
        deliveries are the only record of an event handled); None for a group the engine
        declares itself, whose every handled entry counts."""
        for app in self.apps.apps:
            declared = app.groups.get(group)
            if declared is not None:
                types = (*declared.handlers, *declared.batch_types)
                return {event_type.__name__ for event_type in types}
        if group in self.apps.projections:
            return set()
        return None

    async def _column(self, sql: str, *params: Any) -> set[str]:
        return {str(row[0]) for row in await self.store.fetchall(sql, params)}

    async def _rebuilt(self, watermark: str, types: Sequence[str]) -> set[str]:
        """The events of ``types`` a replay applied (at or below the projection's
        watermark): the processed table keeps only those applied since."""
        row = await self.store.fetchone("SELECT seq FROM positions WHERE name = ?", (watermark,))
        if row is None or not int(row[0]) or not types:
            return set()
        marks = ", ".join("?" for _ in types)
        return await self._column(
            f"SELECT event_id FROM events WHERE seq <= ? AND type IN ({marks})", int(row[0]), *types
        )

    async def _of_types(self, ids: Iterable[str], types: set[str]) -> set[str]:
        if not types:
            return set()
        return {e.event_id for e in await self._events_by_id(set(ids)) if type(e).__name__ in types}

    async def _events_by_id(self, ids: set[str]) -> list[Event]:
        ordered: list[tuple[int, bytes]] = []
        chosen = sorted(ids)
        for start in range(0, len(chosen), CHUNK):
            chunk = chosen[start : start + CHUNK]
            rows = await self.store.fetchall(
                f"SELECT seq, payload FROM events WHERE event_id IN"
                f" ({', '.join('?' for _ in chunk)})",
                chunk,
            )
            ordered += [(int(seq), bytes(payload)) for seq, payload in rows]
        return [decode(payload) for _, payload in sorted(ordered)]


def _names(types: Sequence[type[Event] | str]) -> list[str]:
    return [t if isinstance(t, str) else t.__name__ for t in types]


@asynccontextmanager
async def open_deployment(config: Config) -> AsyncIterator[Deployment]:
    """``config``'s deployment, read by a test: its apps loaded (their event types join
    this process's codec), its store migrated and opened, its Redis connected; all
    closed at the end."""
    parts = assemble(config)
    async with parts.open_resources() as resources:
        yield Deployment(resources, parts.apps)
