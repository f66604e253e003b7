"""Which unexpected failures the API answers with 503 (a dependency is down) rather than 500."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import redis.exceptions

from sluice.http.degrade import unavailable


def sqlite_error(path: Path, statement: str, *, locked: bool = False) -> sqlite3.Error:
    """The error SQLite itself raises for ``statement``, with its result code."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE IF NOT EXISTS t (x)")
    if locked:
        holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.Error) as caught:
            other.execute(statement)
        return caught.value
    finally:
        other.close()
        holder.close()


def test_a_busy_database_is_down_and_a_wrong_statement_is_a_bug(tmp_path: Path) -> None:
    busy = sqlite_error(tmp_path / "a.db", "INSERT INTO t VALUES (1)", locked=True)
    assert unavailable(busy) == "the database"
    assert unavailable(sqlite_error(tmp_path / "b.db", "SELECT * FROM missing")) is None
    assert unavailable(sqlite_error(tmp_path / "c.db", "SELEC 1")) is None


def test_redis_errors_are_redis_down_and_other_os_errors_are_not() -> None:
    assert unavailable(redis.exceptions.ConnectionError("refused")) == "Redis"
    assert unavailable(redis.exceptions.TimeoutError("slow")) == "Redis"
    assert unavailable(FileNotFoundError("export.csv")) is None
    assert unavailable(RuntimeError("kaboom")) is None
