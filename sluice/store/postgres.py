"""The PostgreSQL backend: asyncpg, one pool per process, any number of hosts.

Outbox order. PostgreSQL hands out ``seq`` when a row is inserted, not when
its transaction commits, so with writers on several hosts a transaction could
commit ``seq`` 8 while 7 is still open, and a relay reading ``seq > 6`` would
move past 7 for good. sluice closes that gap the way the ``eventsourcing``
library and Commanded's EventStore do: ``tx.append`` only buffers events, and
just before COMMIT the transaction takes one transaction-scoped advisory lock
(``HISTORY_LOCK``), inserts its events (a binary ``COPY``) and commits. PostgreSQL
releases the lock only after the commit is visible to new snapshots, so the next appender
takes its numbers after this one's rows are visible: commit order is ``seq``
order, the committed history is a prefix of the numbers handed out (rolled-back
numbers aside), and a relay reading ``seq > position`` never skips a row that
commits later. Each aggregate's events are therefore published in commit order.

The cost: transactions that append events commit one at a time across the
whole deployment, each holding the lock for its events' COPY and its COMMIT
(the WAL flush). Group commit amortises it (the visit writer appends hundreds
of visits under one lock); transactions that append nothing never take it.
The relay is woken after the commit (Redis pub/sub), never by a NOTIFY inside
the transaction.

Round trips. A transaction that only appends costs three: BEGIN with the history
lock in one message (its connection is acquired and begun by its first statement),
the COPY, and COMMIT with the session reset asyncpg's pool would otherwise send as a
query of its own on release (``sluice.store.postgres_session``; five before issue 45,
bench/pg_round_trips.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import structlog
from asyncpg.pool import PoolConnectionProxy

from sluice.store.base import HEAD, NO_OVERRIDES, Row, StoredEvent
from sluice.store.errors import DatabaseUnavailable, database_unavailable
from sluice.store.migrate import Migration, apply_migrations
from sluice.store.postgres_dialect import DIALECT, numbered
from sluice.store.postgres_session import (
    CORRUPTED,
    PooledConnection,
    commit,
    drop_if_broken,
    mark_session_kept,
    reset,
    roll_back,
)
from sluice.store.postgres_tx import PostgresTx
from sluice.telemetry.prometheus import EVENTS_COMMITTED

log = structlog.get_logger(__name__)

_EVENT_COLUMNS = "seq, event_id, type, aggregate, payload, trace_id, created_at, traceparent"
_SET_POSITION = (
    "INSERT INTO positions (name, seq) VALUES ($1, $2)"
    " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq"
)
# The same, its (implicit) transaction committing without waiting for the WAL flush.
_SET_POSITION_LAZILY = (
    "WITH lazily AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))"
    " INSERT INTO positions (name, seq) SELECT $1, $2 FROM lazily"
    " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq"
)
_STALE_STATISTICS = (
    "SELECT c.reltuples < 0 OR s.n_mod_since_analyze > 1000 + c.reltuples / 10"
    " FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid"
    " WHERE c.oid = to_regclass($1)"
)
# Seconds to wait for a new connection: a database that cannot be reached fails fast.
CONNECT_TIMEOUT = 5.0
# Seconds a process starting waits for its database to answer.
START_WAIT = 30.0
# Seconds to wait for a free pooled connection: a saturated pool is the database
# not keeping up, answered like an outage (503, held work), never a hang.
ACQUIRE_TIMEOUT = 30.0
IDLE_IN_TRANSACTION_MS = 60_000


class PoolExhausted(DatabaseUnavailable):
    """No pooled connection came free within ``ACQUIRE_TIMEOUT``."""


def _stale(exc: BaseException) -> bool:
    """A pooled connection that had already died (a database restart), before it ran."""
    if isinstance(exc, asyncpg.exceptions.ConnectionDoesNotExistError | CORRUPTED):
        return True
    return isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc)


class PostgresStore:
    """A connection pool; each transaction holds one connection from BEGIN to COMMIT."""

    dialect = DIALECT
    snapshot_every = NO_OVERRIDES

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._column_types: dict[str, dict[str, str]] = {}  # for PostgresTx.upsert_rows
        self._listeners: list[Callable[[], None]] = []

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        wait: float = START_WAIT,
        migrate: bool = True,
        steps: Sequence[Migration] = (),
        apps: Sequence[str] | None = None,
    ) -> PostgresStore:
        """Connect and (unless ``migrate`` is false) migrate and check ``apps`` against the
        deployment's (``sluice.store.app_set``). A database that is down (a
        deployment starting before its database, a restart) is waited for, up to ``wait``
        seconds."""
        deadline = time.monotonic() + wait
        delay = 0.1
        while True:
            try:
                return await cls._open(url, pool_size, migrate, steps, apps)
            except Exception as exc:
                if not database_unavailable(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning("database unavailable, waiting", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    @classmethod
    async def _open(
        cls,
        url: str,
        pool_size: int,
        migrate: bool,
        steps: Sequence[Migration],
        apps: Sequence[str] | None,
    ) -> PostgresStore:
        pool = await asyncpg.create_pool(
            url,
            min_size=1,
            max_size=pool_size,
            # A session left idle inside a transaction (a client that hung or lost
            # track of it) gives its locks back after this, instead of holding every
            # writer behind it; sluice's own transactions never idle that long.
            server_settings={"idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_MS)},
            timeout=CONNECT_TIMEOUT,
            # A pooled connection idle for a minute is closed: after a database restart
            # the pool does not keep handing out connections that died with it.
            max_inactive_connection_lifetime=60.0,
            # A connection's COMMIT resets its session in the same message: the pool's
            # own reset query runs only for the others (sluice.store.postgres_session).
            connection_class=PooledConnection,
            reset=reset,
        )
        store = cls(pool)
        try:
            if migrate:
                await store.migrate(steps, apps=apps)
        except BaseException:
            await pool.close()
            raise
        return store

    async def migrate(
        self,
        steps: Sequence[Migration] = (),
        *,
        apps: Sequence[str] | None = None,
        change_apps: bool = False,
    ) -> list[str]:
        """Apply pending migrations, then record or check the deployment's ``apps``
        (``sluice.store.app_set``); one process at a time, whatever the number of hosts."""
        async with self.transaction() as tx:
            await tx.lock_migrations()
            applied = await apply_migrations(tx, steps, apps=apps, change_apps=change_apps)
        if applied:
            log.info("migrations applied", versions=applied)
        return applied

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PostgresTx]:
        # The connection is acquired and begun by the first statement (PostgresTx): a
        # transaction that ran none has nothing to commit and holds no connection.
        tx = PostgresTx(None, self._column_types, opener=self._begin)
        tx.snapshot_every = self.snapshot_every
        try:
            try:
                yield tx
                types = await tx.flush_events()
            except BaseException as exc:
                if tx.connection is not None:
                    await roll_back(tx.connection, exc)
                raise
            if tx.connection is not None:
                try:
                    await commit(tx.connection)
                except BaseException as exc:
                    await roll_back(tx.connection, exc)
                    raise
        finally:
            if tx.connection is not None:
                await self._pool.release(tx.connection)
        if types:
            for kind, n in types.items():
                EVENTS_COMMITTED.labels(kind).inc(n)
            for callback in self._listeners:
                callback()

    async def _acquire(self) -> PoolConnectionProxy:
        try:
            return await self._pool.acquire(timeout=ACQUIRE_TIMEOUT)
        except TimeoutError:
            raise PoolExhausted(
                f"no database connection came free in {ACQUIRE_TIMEOUT:.0f} s"
                " (SLUICE_DATABASE_POOL is too small, or the database is not keeping up)"
            ) from None

    async def _begin(self, then: str) -> PoolConnectionProxy:
        """A pooled connection in a new transaction, ``then`` (SQL without parameters)
        sent in BEGIN's message. A connection that died with a database restart fails
        its BEGIN, before anything ran: it is dropped and the BEGIN tried once on
        another, so a restart costs only the work in flight."""
        for attempt in (1, 2):
            conn = await self._acquire()
            try:
                await conn.execute(f"BEGIN;{then}")
            except BaseException as exc:
                await roll_back(conn, exc)  # a BEGIN that went through, then its lock failed
                await self._pool.release(conn)
                if attempt == 2 or not _stale(exc):
                    raise
                continue
            return conn
        raise AssertionError("unreachable")

    async def _read(self, method: str, sql: str, *args: Any, own: bool = True) -> Any:
        """One statement on a pooled connection (``fetch``, ``fetchrow``...), tried once
        more on another when the first connection had died with a restart: a read (or
        an upsert of a position) can run twice harmlessly. sluice's ``own`` statements
        set nothing on the session: the pool's reset query is skipped after them."""
        for attempt in (1, 2):
            conn = await self._acquire()
            try:
                result = await getattr(conn, method)(sql, *args)
                if own:
                    mark_session_kept(conn)
                return result
            except BaseException as exc:
                drop_if_broken(conn, exc)
                if attempt == 2 or not _stale(exc):
                    raise
            finally:
                await self._pool.release(conn)
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[PostgresTx]:
        """A read-only REPEATABLE READ transaction: every read in it sees one snapshot,
        whatever commits meanwhile."""
        async with (
            self._pool.acquire(timeout=ACQUIRE_TIMEOUT) as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield PostgresTx(conn, self._column_types)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row = await self._read("fetchrow", numbered(sql), *params, own=False)
        return None if row is None else tuple(row)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [tuple(r) for r in await self._read("fetch", numbered(sql), *params, own=False)]

    async def events_after(
        self, seq: int, limit: int, *, types: Sequence[str] = ()
    ) -> list[StoredEvent]:
        if types:
            rows = await self._read(
                "fetch",
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq > $1 AND type = ANY($2::text[])"
                " ORDER BY seq LIMIT $3",
                seq,
                list(types),
                limit,
            )
        else:
            rows = await self._read(
                "fetch",
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                seq,
                limit,
            )
        return [StoredEvent(*row) for row in rows]

    async def max_seq(self) -> int:
        return int(await self._read("fetchval", HEAD))

    async def position(self, name: str) -> int:
        seq = await self._read("fetchval", "SELECT seq FROM positions WHERE name = $1", name)
        return 0 if seq is None else int(seq)

    async def insert_rows(
        self,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        durable: bool = True,
    ) -> None:
        """A transaction of its own, run once (never again on another connection, which
        could insert the rows twice)."""
        if not rows:
            return
        async with self.transaction() as tx:
            if not durable:
                await tx.execute("SET LOCAL synchronous_commit = off")
            await tx.insert_rows(table, columns, rows)

    async def set_position(self, name: str, seq: int, *, durable: bool = True) -> None:
        await self._read("execute", _SET_POSITION if durable else _SET_POSITION_LAZILY, name, seq)

    async def refresh_statistics(self, *tables: str) -> None:
        """ANALYZE each table that was never analysed or changed by more than a tenth
        since (autovacuum gets there too, but later: right after a bulk load the
        planner would sort the whole history instead of walking its index)."""
        for table in tables:
            stale = await self._read("fetchval", _STALE_STATISTICS, table)
            if stale:
                await self._read("execute", f'ANALYZE "{table}"')

    def add_commit_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    async def ping(self) -> None:
        await self._read("fetchval", "SELECT 1")

    async def close(self) -> None:
        await self._pool.close()
