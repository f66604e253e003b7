"""What counts as the database being down (503, held work) and what does not."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
import redis.exceptions

from sluice.store.errors import DatabaseUnavailable, database_unavailable


def _raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as caught:
        return caught


def _sqlite(code: int) -> sqlite3.Error:
    error = sqlite3.OperationalError("database failure")
    error.sqlite_errorcode = code
    return error


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(_sqlite(sqlite3.SQLITE_BUSY), id="sqlite-busy"),
        pytest.param(_sqlite(sqlite3.SQLITE_IOERR), id="sqlite-ioerr"),
        pytest.param(asyncpg.exceptions.CannotConnectNowError("starting up"), id="pg-starting"),
        pytest.param(asyncpg.exceptions.AdminShutdownError("terminating"), id="pg-shutdown"),
        pytest.param(asyncpg.exceptions.TooManyConnectionsError("too many"), id="pg-too-many"),
        pytest.param(asyncpg.exceptions.DeadlockDetectedError("deadlock"), id="pg-deadlock"),
        pytest.param(asyncpg.exceptions.ConnectionDoesNotExistError("closed"), id="pg-closed"),
        pytest.param(ConnectionRefusedError(111, "refused"), id="refused-connect"),
        pytest.param(DatabaseUnavailable("pool exhausted"), id="pool-exhausted"),
        pytest.param(
            _raised_from(RuntimeError("could not check mail"), ConnectionResetError()),
            id="raised-from-a-reset",
        ),
    ],
)
def test_outages_count_as_the_database_being_down(error: BaseException) -> None:
    assert database_unavailable(error)


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(_sqlite(sqlite3.SQLITE_CONSTRAINT), id="sqlite-constraint"),
        pytest.param(asyncpg.exceptions.UniqueViolationError("dup"), id="pg-unique"),
        pytest.param(asyncpg.exceptions.UndefinedColumnError("no column"), id="pg-bad-sql"),
        pytest.param(ValueError("a bug"), id="a-bug"),
        pytest.param(TimeoutError(), id="bare-timeout"),
        pytest.param(
            _raised_from(redis.exceptions.ConnectionError("redis"), ConnectionRefusedError()),
            id="redis-refused",
        ),
    ],
)
def test_errors_of_statements_and_of_redis_do_not(error: BaseException) -> None:
    assert not database_unavailable(error)
