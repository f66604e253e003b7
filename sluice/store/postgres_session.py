"""A pooled PostgreSQL connection between two transactions, and a transaction's hold on it.

Round trips. asyncpg resets a connection given back to its pool by a query of its own
(``Connection.get_reset_query()``: session advisory locks released, cursors closed,
``UNLISTEN *``, ``RESET ALL``), one more round trip after each COMMIT. sluice sends
that reset in the COMMIT's own message instead (``commit_message``), so nothing an
app's SQL left on the session (a session ``SET``, a ``LISTEN``, a session advisory
lock, a cursor ``WITH HOLD``) outlives its transaction, and the pool skips its query
for a connection so committed (``reset``); and for one that ran only a statement of
sluice's own outside a transaction (``PostgresStore._read``: the relay's reads, a
position's upsert), which sets nothing on the session. A connection given back any
other way (a rollback, an error, a caller's own SQL) is reset as asyncpg always did.

A transaction's connection is acquired and its BEGIN sent with its first statement
(``PostgresSession``): a transaction that only appends sends BEGIN and the history
lock in one message, and one that runs no statement sends nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

Connection = PoolConnectionProxy  # sluice's every statement runs on a pooled connection
# Acquires a pooled connection and sends BEGIN, with the statements given after it.
Opener = Callable[[str], Awaitable[PoolConnectionProxy]]

_RESET_ALL = "RESET ALL;"


def commit_message(reset_query: str) -> str:
    """COMMIT and the pool's reset query as one simple-query message. The reset's
    statements run before the COMMIT, inside the transaction: one that fails aborts it
    and the COMMIT is never run (no caller is told of a failure after its commit).
    ``RESET ALL`` alone comes after: inside, it would undo the transaction's own
    ``SET LOCAL synchronous_commit`` before the COMMIT it is for."""
    lines = reset_query.splitlines()
    before = [line for line in lines if line.strip() != _RESET_ALL]
    after = [line for line in lines if line.strip() == _RESET_ALL]
    return "\n".join([*before, "COMMIT;", *after])


class PooledConnection(asyncpg.Connection):
    """The pool's connections (``create_pool(connection_class=...)``): each knows whether
    its session is as a reset would leave it (``reset``)."""

    _session_kept = False
    _commit_message: str | None = None

    async def commit_and_reset(self) -> None:
        """COMMIT the open transaction and reset the session, in one round trip."""
        if self._commit_message is None:
            self._commit_message = commit_message(self.get_reset_query())
        await self.execute(self._commit_message)
        self._session_kept = True

    def keep_session(self) -> None:
        """What ran since the last reset set nothing on the session (sluice's own SQL)."""
        self._session_kept = True

    def take_session_kept(self) -> bool:
        kept, self._session_kept = self._session_kept, False
        return kept


async def reset(conn: asyncpg.Connection[Any]) -> None:
    """The pool's reset on release (asyncpg has already rolled back a transaction left
    open): its query, unless the session holds nothing it would undo."""
    if isinstance(conn, PooledConnection) and conn.take_session_kept():
        return
    query = conn.get_reset_query()
    if query:
        await conn.execute(query)


# What asyncpg raises when a connection died in the middle of a statement and its
# protocol state no longer adds up (MagicStack/asyncpg#1069): the connection must not
# go back to the pool as it is.
CORRUPTED = asyncpg.exceptions.InternalClientError


def drop_if_broken(conn: Connection, exc: BaseException) -> None:
    """Close a connection the failure left unusable; the pool opens a new one."""
    if isinstance(exc, CORRUPTED):
        conn.terminate()


async def roll_back(conn: Connection, exc: BaseException) -> None:
    """End the transaction ``exc`` interrupted (a failed COMMIT may have ended it)."""
    drop_if_broken(conn, exc)
    if conn.is_closed() or not conn.is_in_transaction():
        return
    try:
        await conn.execute("ROLLBACK")
    except Exception:
        # Gone, or busy with the statement the caller abandoned: never let it back
        # into the pool with its transaction (and locks) open.
        conn.terminate()


# A pool proxy hands these calls on to its PooledConnection.


async def commit(conn: Connection) -> None:
    """COMMIT ``conn``'s transaction, its session reset in the same message."""
    await conn.commit_and_reset()  # type: ignore[attr-defined]


def mark_session_kept(conn: Connection) -> None:
    """Only sluice's own SQL ran on ``conn`` since its last reset: none is needed."""
    conn.keep_session()  # type: ignore[attr-defined]


class PostgresSession:
    """A transaction's connection, acquired and begun by its first statement (``_session``)
    when the transaction was opened with an ``Opener``; a snapshot's, given begun."""

    def __init__(self, conn: Connection | None, opener: Opener | None = None) -> None:
        self._conn = conn
        self._opener = opener

    @property
    def connection(self) -> Connection | None:
        """The connection, once a statement has begun the transaction on it."""
        return self._conn

    async def _session(self) -> Connection:
        """The transaction's connection, acquired and begun now if no statement ran yet."""
        if self._conn is None:
            return await self._open("")
        return self._conn

    async def _open(self, first: str) -> Connection:
        """Acquire and BEGIN, ``first`` (SQL without parameters) in BEGIN's message."""
        if self._conn is not None or self._opener is None:
            raise RuntimeError("the transaction has begun already")
        self._conn = await self._opener(first)
        return self._conn
