"""Another process on the test's SQLite file: holding its write lock, or checking it is free."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def write_locked(path: Path) -> Iterator[None]:
    """Another process holds the database's write lock until the block ends."""
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        locker.rollback()
        locker.close()


def assert_writable(path: Path) -> None:
    """Another process can take the write lock (within 5 s): nothing of ours still holds it."""
    other = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
