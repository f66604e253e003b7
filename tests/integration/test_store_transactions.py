"""A transaction whose caller gives up while SQLite waits for the write lock leaves nothing open."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sluice.store.sqlite import SqliteStore
from tests.sqlite_helpers import assert_writable, write_locked


async def test_a_cancelled_wait_for_the_write_lock_gives_the_lock_back(tmp_path: Path) -> None:
    path = tmp_path / "sluice.db"
    store = await SqliteStore.open(path)
    try:
        with write_locked(path), pytest.raises(TimeoutError):  # another process writing
            async with asyncio.timeout(0.3):  # a request's deadline, say
                async with store.transaction():
                    pytest.fail("the write lock was free")
        # The other process is done; our BEGIN now gets the lock and gives it back:
        # the other process can write again, and so can we.
        assert_writable(path)
        async with store.transaction() as tx:
            await tx.execute("INSERT INTO positions (name, seq) VALUES ('after', 1)")
        assert await store.position("after") == 1
    finally:
        await store.close()
