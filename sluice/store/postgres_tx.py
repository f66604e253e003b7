"""A PostgreSQL transaction: statements on one connection, and the events it appends,
buffered and inserted last thing before COMMIT under the history lock (the outbox order,
``sluice.store.postgres``). Its connection is acquired and begun by its first statement
(``sluice.store.postgres_session``): a transaction that only appends begins with the
history lock, in one message."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Any

from sluice.events import EVENT_TYPES, REGISTRY, Event, encode, type_name, utcnow
from sluice.store.base import NO_OVERRIDES, Row, appended_under
from sluice.store.postgres_bulk import PostgresBulkWrites
from sluice.store.postgres_catalog import PostgresCatalog
from sluice.store.postgres_dialect import DIALECT, numbered, translate_ddl
from sluice.store.postgres_session import Connection, Opener
from sluice.telemetry import tracing

# pg_advisory_xact_lock keys: "sluice" in ASCII, then one byte per purpose.
HISTORY_LOCK = 0x736C75696365_01
MIGRATIONS_LOCK = 0x736C75696365_02

# What an append writes of each event, in this order (seq comes from its identity).
_APPENDED = ("event_id", "type", "aggregate", "payload", "trace_id", "created_at")
_LOCK_HISTORY = "SELECT pg_advisory_xact_lock($1)"
_BEGIN_LOCKED = f"SELECT pg_advisory_xact_lock({HISTORY_LOCK})"  # sent with BEGIN
APPEND_ROWS = 500  # events per COPY of an append (flush_events)


def _rowcount(status: str) -> int:
    """Rows a statement changed, from its command tag (``UPDATE 3``, ``INSERT 0 1``)."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class PostgresTx(PostgresCatalog, PostgresBulkWrites):
    snapshot_every = NO_OVERRIDES  # its store's, for a write transaction

    def __init__(
        self,
        conn: Connection | None,
        column_types: dict[str, dict[str, str]],
        *,
        opener: Opener | None = None,
    ) -> None:
        super().__init__(conn, opener)
        self._column_types = column_types  # the store's, shared by its transactions
        self._events: list[Event] = []
        # With tracing on, the traceparent each buffered event was appended under.
        self._parents: list[str | None] = []
        self._history_locked = False
        self.dialect = DIALECT

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        conn = await self._session()
        return _rowcount(await conn.execute(numbered(sql), *params))

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        conn = await self._session()
        await conn.executemany(numbered(sql), rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        conn = await self._session()
        row = await conn.fetchrow(numbered(sql), *params)
        return None if row is None else tuple(row)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        conn = await self._session()
        return [tuple(r) for r in await conn.fetch(numbered(sql), *params)]

    async def append(
        self, *events: Event, traceparents: Sequence[str | None] | None = None
    ) -> None:
        # Inserted at commit, under the history lock: see the module docstring.
        for e in events:
            if type(e).__name__ not in EVENT_TYPES:  # nothing could read it back: refused
                raise REGISTRY.undeclared(type(e))
        if traceparents is not None or tracing.ENABLED:
            # The appending spans, read now (the COPY runs at commit), each at its event's
            # place: None for the events appended before with tracing off.
            parents = appended_under(events, traceparents)
            if parents is not None:
                self._parents += [None] * (len(self._events) - len(self._parents))
                self._parents += parents
        self._events.extend(events)

    async def lock_history(self) -> None:
        """Hold back every other append until this transaction ends: the history's head,
        read after this, stays the head until then."""
        if self._history_locked:
            return
        if self.connection is None:  # nothing ran yet: one message, BEGIN and the lock
            await self._open(_BEGIN_LOCKED)
        else:
            await self.connection.execute(_LOCK_HISTORY, HISTORY_LOCK)
        self._history_locked = True

    async def serialize(self, name: str) -> None:
        conn = await self._session()
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", name)

    async def execute_script(self, script: str) -> None:
        conn = await self._session()
        await conn.execute(translate_ddl(script))

    async def lock_migrations(self) -> None:
        conn = await self._session()
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATIONS_LOCK)

    async def flush_events(self) -> collections.Counter[str]:
        """Insert the buffered events, last thing before COMMIT; their counts per type.

        One binary ``COPY`` per ``APPEND_ROWS`` events, after the history lock: no seq
        is drawn before the lock is held. ``COPY``, not an ``INSERT ... SELECT FROM
        unnest(...)`` of one array per column: asyncpg checks every element of an array
        against two ``collections.abc`` classes in Python, and an appending process
        spent 52k instructions per event so, against 29k (bench/README.md, peers.py).
        Each chunk's rows are built just before its ``COPY`` (the first chunk's before
        the lock): a visit writer's commit of a thousand visits holds the event loop one
        chunk at a time (redirect.py).
        """
        events = self._events
        if not events:
            return collections.Counter()
        kinds = [type_name(e) for e in events]
        created_at = utcnow().isoformat()
        # The appending spans' traceparents, a column of its own only when one was read.
        parents = (
            [*self._parents, *[None] * (len(events) - len(self._parents))]
            if any(self._parents)
            else None
        )
        for start in range(0, len(events), APPEND_ROWS):
            rows: list[tuple[object, ...]] = [
                (e.event_id, kind, e.aggregate, encode(e), e.trace_id, created_at)
                for e, kind in zip(
                    events[start : start + APPEND_ROWS],
                    kinds[start : start + APPEND_ROWS],
                    strict=True,
                )
            ]
            columns: tuple[str, ...] = _APPENDED
            if parents is not None:
                rows = [
                    (*r, p) for r, p in zip(rows, parents[start : start + APPEND_ROWS], strict=True)
                ]
                columns = (*_APPENDED, "traceparent")
            await self.lock_history()
            conn = await self._session()
            await conn.copy_records_to_table("events", records=rows, columns=columns)
        return collections.Counter(kinds)
