"""Several components opening one fresh database at once (as `sluice up` does)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sluice.store.sqlite import SqliteStore


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
