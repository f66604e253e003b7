"""A pooled PostgreSQL connection between transactions (sluice.store.postgres_session): the
session reset rides on the COMMIT, the pool sends its own reset query only after a
transaction that did not commit, and no session state an app's SQL made outlives its
transaction either way."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest
from asyncpg.connection import LoggedQuery

from sluice.builtin.links.events import LinkVisited
from sluice.store.postgres import PostgresStore

pytestmark = pytest.mark.stores("postgres")

SESSION_STATE = (
    "SELECT current_setting('application_name'),"
    " (SELECT count(*) FROM pg_listening_channels()),"
    " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())"
)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresStore]:
    """One pooled connection, so every transaction reuses the one before's."""
    opened = await PostgresStore.open(database_url, pool_size=1, migrate=False)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def sent(store: PostgresStore) -> list[str]:
    """Every statement the pooled connection sends from now on, the pool's own included."""
    queries: list[str] = []

    def log(query: LoggedQuery) -> None:
        queries.append(query.query)

    async with store.transaction() as tx:
        await tx.execute("SELECT 1")
        assert tx.connection is not None
        tx.connection.add_query_logger(log)
    queries.clear()  # that transaction's COMMIT
    return queries


async def _leave_session_state(store: PostgresStore) -> None:
    """What an app's SQL could leave on its connection: none of it is ``SET LOCAL``."""
    async with store.transaction() as tx:
        await tx.execute("SET application_name = 'leaked'")
        await tx.execute("LISTEN leaked")
        await tx.execute("SELECT pg_advisory_lock(42)")


async def test_an_append_only_transaction_begins_locked_and_commits_reset(
    store: PostgresStore, sent: list[str]
) -> None:
    head = await store.max_seq()
    sent.clear()  # that read and the pool's reset after it
    async with store.transaction() as tx:
        await tx.append(LinkVisited(code="rt", visitor="a"), LinkVisited(code="rt", visitor="b"))
    assert len(sent) == 2, sent  # BEGIN with the lock; COMMIT with the reset (COPY aside)
    assert sent[0].startswith("BEGIN;SELECT pg_advisory_xact_lock(")
    assert "COMMIT;" in sent[1] and "RESET ALL" in sent[1]
    assert await store.max_seq() == head + 2


async def test_a_transaction_that_runs_nothing_sends_nothing(
    store: PostgresStore, sent: list[str]
) -> None:
    async with store.transaction():
        pass
    assert sent == []


async def test_no_session_state_outlives_a_committed_transaction(
    store: PostgresStore, sent: list[str]
) -> None:
    await _leave_session_state(store)
    commits = len(sent)
    async with store.transaction() as tx:
        state = await tx.fetchone(SESSION_STATE)
    assert sent[commits].startswith("BEGIN")  # no reset query of the pool's in between
    assert state == ("", 0, 0)


async def test_a_connection_given_back_after_an_error_is_reset_by_the_pool(
    store: PostgresStore, sent: list[str]
) -> None:
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.execute("SELECT pg_advisory_lock(42)")  # a session lock: no rollback frees it
            raise RuntimeError("the app failed")
    assert sent[-2:] == ["ROLLBACK", sent[-1]] and "pg_advisory_unlock_all" in sent[-1]
    async with store.transaction() as tx:
        assert await tx.fetchone(SESSION_STATE) == ("", 0, 0)


async def test_a_commit_that_fails_commits_nothing_and_the_connection_is_reset(
    store: PostgresStore, sent: list[str]
) -> None:
    with pytest.raises(Exception, match="aborted"):
        async with store.transaction() as tx:
            await tx.execute("SET application_name = 'leaked'")
            await tx.execute("CREATE TABLE kept (n int)")
            # Swallowed: the transaction is aborted, and its COMMIT must not pass for one.
            with contextlib.suppress(asyncpg.DivisionByZeroError):
                await tx.execute("SELECT 1 / 0")
    assert "pg_advisory_unlock_all" in sent[-1]
    assert await store.fetchone("SELECT to_regclass('kept')") == (None,)
    assert await store.fetchone(SESSION_STATE) == ("", 0, 0)


async def test_sluice_s_own_reads_skip_the_reset_and_a_caller_s_sql_does_not(
    store: PostgresStore, sent: list[str]
) -> None:
    await store.max_seq()
    await store.set_position("session-test", 1)
    assert not any("pg_advisory_unlock_all" in query for query in sent), sent
    await store.fetchone("SET application_name = 'leaked'")
    assert "pg_advisory_unlock_all" in sent[-1]
    assert await store.fetchone(SESSION_STATE) == ("", 0, 0)
