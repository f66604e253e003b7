"""How long the API waits for Redis, and what counts as a dependency being unavailable.

Every Redis call on a request path is optional work with a fallback (dedupe,
leaderboard, login counting): past this timeout the request goes on without it.
Where there is no fallback, a failure of the database or of Redis is a 503, not a 500.
"""

from __future__ import annotations

import sqlite3

import redis.exceptions

REDIS_TIMEOUT = 0.5
REDIS_ERRORS = (redis.exceptions.RedisError, OSError, TimeoutError)

# SQLite result codes that mean the database cannot serve now (locked past the busy
# timeout, I/O, disk full, a file it cannot open, read-only or damaged), not that the
# statement is wrong: https://www.sqlite.org/rescode.html
_DATABASE_DOWN = {
    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOTADB,
}  # fmt: skip


def unavailable(exc: BaseException) -> str | None:
    """The dependency an unexpected exception says is down ("the database", "Redis"), or None."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return "the database" if code is not None and code & 0xFF in _DATABASE_DOWN else None
    if isinstance(exc, redis.exceptions.RedisError):  # not any OSError: a file can fail too
        return "Redis"
    return None
