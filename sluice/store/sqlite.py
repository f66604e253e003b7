"""The SQLite backend: aiosqlite in WAL mode, one writer connection per process."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import aiosqlite
import structlog

from sluice.events import EVENT_TYPES, REGISTRY, Event, encode, type_name, utcnow
from sluice.store.base import (
    HEAD,
    NO_OVERRIDES,
    Row,
    StoredEvent,
    appended_under,
    field_name,
    upsert_clause,
)
from sluice.store.migrate import Migration, apply_migrations
from sluice.store.sqlite_catalog import SqliteCatalog
from sluice.store.sqlite_connect import connect, pragma
from sluice.store.sqlite_dialect import DIALECT
from sluice.store.sqlite_lock import write_lock
from sluice.telemetry import tracing
from sluice.telemetry.prometheus import EVENTS_COMMITTED

log = structlog.get_logger(__name__)

_EVENT_COLUMNS = "seq, event_id, type, aggregate, payload, trace_id, created_at, traceparent"


# Rows per INSERT statement when appending events (6 parameters each; SQLite allows 32766).
APPEND_ROWS = 500
# Parameters per statement of ``insert_rows`` (SQLite takes up to 32,766).
INSERT_PARAMS = 5_000
_EVENT_ROW = "(?, ?, ?, ?, ?, ?)"
_APPENDED = "event_id, type, aggregate, payload, trace_id, created_at"


class SqliteTx(SqliteCatalog):
    snapshot_every = NO_OVERRIDES  # its store's, for a write transaction

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self.dialect = DIALECT
        self.appended = 0
        self.types: collections.Counter[str] = collections.Counter()

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = await self._db.execute(sql, params)
        return int(cursor.rowcount)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self._db.executemany(sql, rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        async with self._db.execute(sql, params) as cursor:
            row = await cursor.fetchone()
        return None if row is None else tuple(row)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        async with self._db.execute(sql, params) as cursor:
            # A list of plain tuples already (no row_factory): returned as it is.
            return cast(list[Row], await cursor.fetchall())

    async def append(
        self, *events: Event, traceparents: Sequence[str | None] | None = None
    ) -> None:
        # Multi-row INSERTs rather than executemany: executemany hands the GIL back and
        # forth with the event loop for every row, which showed in the redirect profile.
        now = utcnow().isoformat()
        # The appending spans' traceparents, a column of its own only when tracing is on
        # (or the caller names each event's).
        parents = (
            None
            if traceparents is None and not tracing.ENABLED
            else appended_under(events, traceparents)
        )
        columns, row = (
            (_APPENDED, _EVENT_ROW)
            if parents is None
            else (_APPENDED + ", traceparent", "(?, ?, ?, ?, ?, ?, ?)")
        )
        for start in range(0, len(events), APPEND_ROWS):
            chunk = events[start : start + APPEND_ROWS]
            params: list[object] = []
            for i, e in enumerate(chunk, start):
                kind = type(e).__name__
                if kind not in EVENT_TYPES:  # nothing could read it back: refused, not committed
                    raise REGISTRY.undeclared(type(e))
                params += (e.event_id, kind, e.aggregate, encode(e), e.trace_id, now)
                if parents is not None:
                    params.append(parents[i])
            await self._db.execute(
                f"INSERT INTO events ({columns}) VALUES {', '.join(row for _ in chunk)}",
                params,
            )
        self.appended += len(events)
        self.types.update(type_name(e) for e in events)

    async def insert_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        await self._insert(table, columns, rows, "")

    async def upsert_rows(
        self,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        keys: Sequence[str],
        add: Sequence[str] = (),
        replace: Sequence[str] = (),
    ) -> None:
        await self._insert(table, columns, rows, upsert_clause(table, keys, add, replace))

    async def insert_new(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str
    ) -> list[Row]:
        tail = f" ON CONFLICT DO NOTHING RETURNING {returning}"
        return await self._insert(table, columns, rows, tail, returns=True)

    async def _insert(
        self,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        tail: str,
        *,
        returns: bool = False,
    ) -> list[Row]:
        """Multi-row INSERTs (``executemany`` hands the GIL back and forth with the
        event loop for every row), each ending with ``tail``; the rows they return
        (``returns``: ``tail`` has a RETURNING clause)."""
        returned: list[Row] = []
        head = f"INSERT INTO {field_name(table)} ({', '.join(map(field_name, columns))}) VALUES "
        one = f"({', '.join('?' for _ in columns)})"
        per = max(1, INSERT_PARAMS // len(columns))
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            sql = head + ", ".join(one for _ in chunk) + tail
            params = [v for row in chunk for v in row]
            if returns:
                returned += await self.fetchall(sql, params)
            else:  # one hop to the database's thread, not two
                await self._db.execute(sql, params)
        return returned

    async def lock_history(self) -> None:
        """Nothing to take: BEGIN IMMEDIATE already holds every other writer back."""

    async def serialize(self, name: str) -> None:
        """Nothing to take: write transactions already run one at a time."""

    async def execute_script(self, script: str) -> None:
        # executescript would COMMIT first; run the statements one by one instead.
        for statement in filter(None, (s.strip() for s in script.split(";"))):
            await self._db.execute(statement)


# A transaction holding the process's write lock this long is reported, with where its
# task waits, and again every HELD_REPORT_EVERY_S while it goes on: every other write of
# the process waits behind it (a mail worker once waited 47 s to record a sent mail).
HELD_REPORT_AFTER_S = 5.0
HELD_REPORT_EVERY_S = 10.0


class _HeldReport:
    """Logs a warning with the holder's stack while one transaction holds the lock long."""

    def __init__(self, holder: asyncio.Task[Any] | None) -> None:
        self._holder = holder
        self._loop = asyncio.get_running_loop()
        self._since = self._loop.time()
        self._timer = self._loop.call_later(HELD_REPORT_AFTER_S, self._report)

    def _report(self) -> None:
        stack = io.StringIO()
        if self._holder is not None:
            self._holder.print_stack(limit=12, file=stack)
        log.warning(
            "sqlite write lock held long: every other write of this process waits",
            seconds=round(self._loop.time() - self._since, 1),
            holder=self._holder.get_name() if self._holder is not None else None,
            stack=stack.getvalue(),
        )
        self._timer = self._loop.call_later(HELD_REPORT_EVERY_S, self._report)

    def cancel(self) -> None:
        self._timer.cancel()


class SqliteStore:
    """Writes go through one connection under a lock (the process's for this file);
    reads use a second one."""

    dialect = DIALECT
    snapshot_every = NO_OVERRIDES

    def __init__(
        self, writer: aiosqlite.Connection, reader: aiosqlite.Connection, lock: asyncio.Lock
    ) -> None:
        self._writer = writer
        self._reader = reader
        self._lock = lock
        self._cleanups: set[asyncio.Future[None]] = set()  # rollbacks still running
        self._listeners: list[Callable[[], None]] = []
        self._lazy = False  # the open transaction commits without waiting for the disk

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        migrate: bool = True,
        steps: Sequence[Migration] = (),
        apps: Sequence[str] | None = None,
    ) -> SqliteStore:
        """Open (creating the file if needed) and, unless ``migrate`` is false, migrate
        (sluice's schema, then the apps' ``steps``) and check ``apps`` against the
        deployment's (``sluice.store.app_set``)."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A new file is the owner's only, whatever the umask: SQLite creates the -wal and
        # -shm files with the mode of the database file, so they follow.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        writer = await connect(path)
        reader = await connect(path)
        store = cls(writer, reader, write_lock(path))
        if migrate:
            try:
                await store.migrate(steps, apps=apps)
            except BaseException:
                # Its connections' threads would keep the process from ever exiting.
                await store.close()
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
        (``sluice.store.app_set``); safe when several processes start at once."""
        async with self.transaction() as tx:  # BEGIN IMMEDIATE: one process at a time
            applied = await apply_migrations(tx, steps, apps=apps, change_apps=change_apps)
        if applied:
            log.info("migrations applied", versions=applied)
        return applied

    @asynccontextmanager
    async def transaction(self, *, durable: bool = True) -> AsyncIterator[SqliteTx]:
        """``durable=False``: the commit does not wait for the disk (WAL mode: a crash of
        the process loses nothing, a power cut may lose this commit)."""
        await self._lock.acquire()
        held = _HeldReport(asyncio.current_task())
        tx = SqliteTx(self._writer)
        tx.snapshot_every = self.snapshot_every
        try:
            if not durable:
                self._lazy = True
                await pragma(self._writer, "PRAGMA synchronous=NORMAL")
            # IMMEDIATE takes the write lock up front: no deadlock on upgrade.
            await self._writer.execute("BEGIN IMMEDIATE")
            yield tx
            await self._writer.execute("COMMIT")
            await self._durable_again()
        except BaseException as exc:
            # Roll back, also after a failed COMMIT (SQLITE_BUSY, disk full), which
            # leaves the transaction open on this shared connection. A caller cancelled
            # while SQLite waits for the lock (a request's deadline) stops waiting at
            # once, but the BEGIN still runs in aiosqlite's thread: the ROLLBACK queued
            # behind it gives the lock back, and this connection stays ours until then.
            held.cancel()
            cleanup = asyncio.ensure_future(self._roll_back_and_release())
            self._cleanups.add(cleanup)
            cleanup.add_done_callback(self._cleanups.discard)
            if not isinstance(exc, asyncio.CancelledError):
                await asyncio.shield(cleanup)
            raise
        held.cancel()
        self._lock.release()
        if tx.appended:
            for kind, n in tx.types.items():
                EVENTS_COMMITTED.labels(kind).inc(n)
            for callback in self._listeners:
                callback()

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[SqliteTx]:
        """A read transaction on a connection of its own: every read in it sees the
        database as the first one did (WAL), whatever commits meanwhile. Read only."""
        files = await self.fetchall("PRAGMA database_list")  # (seq, name, file)
        db = await connect(next(Path(file) for _, name, file in files if name == "main"))
        try:
            await pragma(db, "PRAGMA query_only=ON")
            await db.execute("BEGIN")  # deferred: the snapshot starts at the first read
            yield SqliteTx(db)
        finally:
            with contextlib.suppress(sqlite3.Error):
                await db.execute("ROLLBACK")
            await db.close()

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        async with self._reader.execute(sql, params) as cursor:
            row = await cursor.fetchone()
        return None if row is None else tuple(row)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        async with self._reader.execute(sql, params) as cursor:
            return cast(list[Row], await cursor.fetchall())

    async def events_after(
        self, seq: int, limit: int, *, types: Sequence[str] = ()
    ) -> list[StoredEvent]:
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq > ?"
        params: list[Any] = [seq]
        if types:
            sql += f" AND type IN ({', '.join('?' * len(types))})"
            params.extend(types)
        sql += " ORDER BY seq LIMIT ?"
        params.append(limit)
        rows = await self.fetchall(sql, params)
        return [StoredEvent(*row) for row in rows]

    async def max_seq(self) -> int:
        row = await self.fetchone(HEAD)
        return int(row[0]) if row else 0

    async def position(self, name: str) -> int:
        row = await self.fetchone("SELECT seq FROM positions WHERE name = ?", (name,))
        return int(row[0]) if row else 0

    async def set_position(self, name: str, seq: int, *, durable: bool = True) -> None:
        sql = (
            "INSERT INTO positions (name, seq) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq"
        )
        async with self.transaction(durable=durable) as tx:
            await tx.execute(sql, (name, seq))

    async def _roll_back_and_release(self) -> None:
        try:
            with contextlib.suppress(sqlite3.Error):  # after a failed BEGIN there is nothing
                await self._writer.execute("ROLLBACK")
            await self._durable_again()
        finally:
            self._lock.release()

    async def _durable_again(self) -> None:
        """After a commit that did not wait for the disk, every other one waits again."""
        if self._lazy:
            await pragma(self._writer, "PRAGMA synchronous=FULL")
            self._lazy = False

    async def insert_rows(
        self,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        durable: bool = True,
    ) -> None:
        async with self.transaction(durable=durable) as tx:
            await tx.insert_rows(table, columns, rows)

    async def refresh_statistics(self, *tables: str) -> None:
        """Nothing: sluice's scans on SQLite go by primary key whatever the statistics."""

    def add_commit_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    async def ping(self) -> None:
        await self.fetchone("SELECT 1")

    async def close(self) -> None:
        await self._writer.close()
        await self._reader.close()
