"""Which store failures mean "the database cannot serve now", on either backend.

Those are outages, not bugs: the API answers 503 with ``Retry-After``, and
the relay, workers and schedulers hold their work and try again later. A
wrong statement (a syntax error, a constraint) is none of them and stays an
error.
"""

from __future__ import annotations

import socket
import sqlite3

import asyncpg

from sluice.errors import SluiceError

# SQLite result codes that mean the database cannot serve now (locked past the busy
# timeout, I/O, disk full, a file it cannot open, read-only or damaged), not that the
# statement is wrong: https://www.sqlite.org/rescode.html
_SQLITE_DOWN = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_NOMEM,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_CORRUPT,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL,
    sqlite3.SQLITE_NOTADB,
}

# PostgreSQL: connection failures (class 08), shutdown and cancellation (57: a restart,
# a statement timeout), resources (53: too many connections, disk full), a transaction
# to retry (40: serialization, deadlock), a read-only server (a standby after failover).
_POSTGRES_DOWN = (
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.TransactionRollbackError,
    asyncpg.exceptions.ReadOnlySQLTransactionError,
)
# What asyncpg raises below the protocol: refused or reset connections, a server name
# that does not resolve. (A bare TimeoutError is not taken as the database's: Redis
# calls on request paths time out too.)
_NETWORK = (ConnectionError, socket.gaierror)


def database_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) says the database is down.

    A Redis error on the way stops the search: a refused connection under a Redis
    ``ConnectionError`` is Redis being down, not the database.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _from_redis(current):
            return False
        if _down(current):
            return True
        current = current.__cause__ or current.__context__
    return False


class DatabaseUnavailable(SluiceError):
    """Raised by a backend itself when the database cannot serve now."""


def _down(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_DOWN
    if isinstance(exc, (*_POSTGRES_DOWN, DatabaseUnavailable)):
        return True
    if isinstance(exc, asyncpg.exceptions.InterfaceError):
        return "connection" in str(exc) and "closed" in str(exc)
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        # A connection that died mid-statement (asyncpg#1069); the store closes it.
        return True
    return isinstance(exc, _NETWORK)


def _from_redis(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("redis.")
