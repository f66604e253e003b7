"""Opening a SQLite connection as sluice runs it (``sluice.store.sqlite``): the pragmas
every connection gets, then WAL, retried while processes starting together race for it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import aiosqlite

_PRAGMAS = (
    # First, so every later statement waits for a lock instead of failing.
    "PRAGMA busy_timeout=10000",
    # FULL: a 2xx means the events survive a power cut, not only a crash.
    "PRAGMA synchronous=FULL",
    "PRAGMA foreign_keys=ON",
)


async def connect(path: Path) -> aiosqlite.Connection:
    """A connection to ``path`` with sluice's pragmas, in WAL mode."""
    db = await aiosqlite.connect(path, isolation_level=None)
    for statement in _PRAGMAS:
        await pragma(db, statement)
    await _enable_wal(db)
    return db


async def pragma(db: aiosqlite.Connection, statement: str) -> None:
    """Run a pragma and close its cursor: an open one keeps a read lock on the file."""
    async with db.execute(statement) as cursor:
        await cursor.fetchall()


async def _enable_wal(db: aiosqlite.Connection) -> None:
    """Switch a new database to WAL; the switch skips the busy handler, so retry it:
    processes starting together on a fresh file (``sluice up``) race for it."""
    for attempt in range(100):
        try:
            await pragma(db, "PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            await asyncio.sleep(0.05)
