"""A transaction that holds the SQLite store's write lock long is reported with where it
waits: every other write of the process waits behind it, and without the report such a
stall (a mail worker once waited 47 s to record a sent mail) shows only as slowness."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sluice.app.testing import wait_for
from sluice.store import sqlite


async def _hold_the_lock(store: sqlite.SqliteStore, release: asyncio.Event) -> None:
    async with store.transaction() as tx:
        await tx.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        await release.wait()


async def test_a_long_held_write_lock_is_reported_with_the_holders_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite, "HELD_REPORT_AFTER_S", 0.05)
    monkeypatch.setattr(sqlite, "HELD_REPORT_EVERY_S", 0.05)
    store = await sqlite.SqliteStore.open(tmp_path / "lock.db", migrate=False)
    release = asyncio.Event()
    try:
        with capture_logs() as logs:
            holder = asyncio.create_task(_hold_the_lock(store, release))

            async def reported_once() -> bool:
                return any("write lock held long" in e["event"] for e in logs)

            await wait_for(reported_once, timeout=5, interval=0.01)
            release.set()
            await holder
            reported = len(logs)
            await asyncio.sleep(0.2)  # released: no further report
        [first, *_] = [e for e in logs if "write lock held long" in e["event"]]
        assert "_hold_the_lock" in first["stack"]
        assert first["log_level"] == "warning"
        assert len(logs) == reported
        async with store.transaction():  # the lock went back
            pass
    finally:
        await store.close()
