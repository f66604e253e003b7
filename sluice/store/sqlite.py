"""The SQLite backend: aiosqlite in WAL mode, one writer connection per process."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from sluice.events import Event, encode, type_name, utcnow
from sluice.metrics import EVENTS_COMMITTED
from sluice.store.base import Row, StoredEvent
from sluice.store.migrations import MIGRATIONS

log = structlog.get_logger(__name__)

_PRAGMAS = (
    # First, so every later statement waits for a lock instead of failing.
    "PRAGMA busy_timeout=10000",
    # FULL: a 2xx means the events survive a power cut, not only a crash.
    "PRAGMA synchronous=FULL",
    "PRAGMA foreign_keys=ON",
)
_EVENT_COLUMNS = "seq, event_id, type, aggregate, payload, trace_id, created_at"


async def _connect(path: Path) -> aiosqlite.Connection:
    db = await aiosqlite.connect(path, isolation_level=None)
    for pragma in _PRAGMAS:
        await _pragma(db, pragma)
    await _enable_wal(db)
    return db


async def _pragma(db: aiosqlite.Connection, pragma: str) -> None:
    """Run a pragma and close its cursor: an open one keeps a read lock on the file."""
    async with db.execute(pragma) as cursor:
        await cursor.fetchall()


async def _enable_wal(db: aiosqlite.Connection) -> None:
    """Switch a new database to WAL; the switch skips the busy handler, so retry it.

    Processes starting together on a fresh file (``sluice up``) race for it.
    """
    for attempt in range(100):
        try:
            await _pragma(db, "PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            await asyncio.sleep(0.05)


# Rows per INSERT statement when appending events (6 parameters each; SQLite allows 32766).
APPEND_ROWS = 500
_EVENT_ROW = "(?, ?, ?, ?, ?, ?)"


class SqliteTx:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
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
            return [tuple(r) for r in await cursor.fetchall()]

    async def append(self, *events: Event) -> None:
        # Multi-row INSERTs rather than executemany: executemany hands the GIL back and
        # forth with the event loop for every row, which showed in the redirect profile.
        now = utcnow().isoformat()
        for start in range(0, len(events), APPEND_ROWS):
            chunk = events[start : start + APPEND_ROWS]
            params: list[object] = []
            for e in chunk:
                params += (e.event_id, type_name(e), e.aggregate, encode(e), e.trace_id, now)
            await self._db.execute(
                "INSERT INTO events (event_id, type, aggregate, payload, trace_id, created_at)"
                f" VALUES {', '.join(_EVENT_ROW for _ in chunk)}",
                params,
            )
        self.appended += len(events)
        self.types.update(type_name(e) for e in events)

    async def execute_script(self, script: str) -> None:
        # executescript would COMMIT first; run the statements one by one instead.
        for statement in filter(None, (s.strip() for s in script.split(";"))):
            await self._db.execute(statement)


class SqliteStore:
    """Writes go through one connection under a lock; reads use a second one."""

    def __init__(self, writer: aiosqlite.Connection, reader: aiosqlite.Connection) -> None:
        self._writer = writer
        self._reader = reader
        self._lock = asyncio.Lock()
        self._cleanups: set[asyncio.Future[None]] = set()  # rollbacks still running
        self._listeners: list[Callable[[], None]] = []

    @classmethod
    async def open(cls, path: Path) -> SqliteStore:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = await _connect(path)
        reader = await _connect(path)
        store = cls(writer, reader)
        await store.migrate()
        return store

    async def migrate(self) -> list[int]:
        """Apply pending migrations; safe when several processes start at once."""
        applied: list[int] = []
        async with self.transaction() as tx:
            await tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            done = {row[0] for row in await tx.fetchall("SELECT version FROM schema_migrations")}
            for version, name, script in MIGRATIONS:
                if version in done:
                    continue
                await tx.execute_script(script)
                await tx.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                    (version, name, utcnow().isoformat()),
                )
                applied.append(version)
        if applied:
            log.info("migrations applied", versions=applied)
        return applied

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqliteTx]:
        await self._lock.acquire()
        tx = SqliteTx(self._writer)
        try:
            # IMMEDIATE takes the write lock up front: no deadlock on upgrade.
            await self._writer.execute("BEGIN IMMEDIATE")
            yield tx
            await self._writer.execute("COMMIT")
        except BaseException as exc:
            # Roll back, also after a failed COMMIT (SQLITE_BUSY, disk full), which
            # leaves the transaction open on this shared connection. A caller cancelled
            # while SQLite waits for the lock (a request's deadline) stops waiting at
            # once, but the BEGIN still runs in aiosqlite's thread: the ROLLBACK queued
            # behind it gives the lock back, and this connection stays ours until then.
            cleanup = asyncio.ensure_future(self._roll_back_and_release())
            self._cleanups.add(cleanup)
            cleanup.add_done_callback(self._cleanups.discard)
            if not isinstance(exc, asyncio.CancelledError):
                await asyncio.shield(cleanup)
            raise
        self._lock.release()
        if tx.appended:
            for kind, n in tx.types.items():
                EVENTS_COMMITTED.labels(kind).inc(n)
            for callback in self._listeners:
                callback()

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        async with self._reader.execute(sql, params) as cursor:
            row = await cursor.fetchone()
        return None if row is None else tuple(row)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        async with self._reader.execute(sql, params) as cursor:
            return [tuple(r) for r in await cursor.fetchall()]

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
        row = await self.fetchone("SELECT COALESCE(MAX(seq), 0) FROM events")
        return int(row[0]) if row else 0

    async def position(self, name: str) -> int:
        row = await self.fetchone("SELECT seq FROM positions WHERE name = ?", (name,))
        return int(row[0]) if row else 0

    async def set_position(self, name: str, seq: int) -> None:
        async with self.transaction() as tx:
            await tx.execute(
                "INSERT INTO positions (name, seq) VALUES (?, ?)"
                " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq",
                (name, seq),
            )

    async def _roll_back_and_release(self) -> None:
        try:
            with contextlib.suppress(sqlite3.Error):  # after a failed BEGIN there is nothing
                await self._writer.execute("ROLLBACK")
        finally:
            self._lock.release()

    def add_commit_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    async def ping(self) -> None:
        await self.fetchone("SELECT 1")

    async def close(self) -> None:
        await self._writer.close()
        await self._reader.close()
