"""Several processes opening one fresh database at once (as `sluice up`, or many hosts, do)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.app.assembly import open_store
from sluice.app.loading import load_apps
from sluice.app.testing import child_env
from sluice.config import Config
from sluice.store.migrations import MIGRATIONS
from sluice.store.sqlite import SqliteStore


@pytest.mark.stores("sqlite")
async def test_concurrent_opens_of_a_fresh_database_all_succeed(tmp_path: Path) -> None:
    for attempt in range(5):
        path = tmp_path / f"db{attempt}" / "sluice.db"
        stores = await asyncio.wait_for(
            asyncio.gather(*(SqliteStore.open(path) for _ in range(4))), timeout=30
        )
        try:
            row = await stores[0].fetchone("PRAGMA journal_mode")
            assert row == ("wal",)
            assert len(await stores[1].fetchall("SELECT version FROM schema_migrations")) >= 5
        finally:
            for store in stores:
                await store.close()


async def test_processes_starting_together_apply_each_migration_once(
    make_config: Callable[..., Config], empty_database_url: str | None
) -> None:
    """Six ``sluice migrate`` processes on one empty database: all succeed, one history."""
    config = make_config(database_url=empty_database_url or "")
    pipe = asyncio.subprocess.PIPE
    command = (sys.executable, "-m", "sluice", "migrate")
    processes = [
        await asyncio.create_subprocess_exec(
            *command, env=child_env(config), stdout=pipe, stderr=pipe
        )
        for _ in range(6)
    ]
    results = await asyncio.wait_for(
        asyncio.gather(*(p.communicate() for p in processes)), timeout=60
    )
    assert [p.returncode for p in processes] == [0] * 6, [err for _, err in results]
    store = await open_store(config)
    try:
        rows = await store.fetchall(
            "SELECT version, COUNT(*) FROM schema_migrations GROUP BY version"
        )
        app_rows = await store.fetchall(
            "SELECT owner, version, COUNT(*) FROM app_migrations GROUP BY owner, version"
        )
    finally:
        await store.close()
    assert sorted(rows) == [(version, 1) for version, _, _ in sorted(MIGRATIONS)]
    # The apps' steps too (most tables are theirs): each recorded once.
    steps = load_apps(config).migrations
    assert sorted(app_rows) == sorted((step.owner, step.version, 1) for step in steps)
