"""Migration 27 (docs/guides/tasks.md) on a database that already has run records: they keep their
trigger and status, and the one-run-per-occurrence index now covers catch-up and backfill."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.store import migrations
from sluice.store.sqlite import SqliteStore

OLD_ROW = (
    "INSERT INTO task_runs (id, task, trigger, status, scheduled_for, started_at, trace_id,"
    " holder) VALUES (?, 'tick', ?, ?, ?, '2026-01-01T00:00:00.000000Z', 't', 'h')"
)


@pytest.mark.stores("sqlite")
async def test_run_records_survive_migration_27(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sluice.db"
    before = [m for m in migrations.MIGRATIONS if m[0] < 27]
    monkeypatch.setattr(migrations, "MIGRATIONS", before)
    store = await SqliteStore.open(path)
    assert (27,) not in await store.fetchall("SELECT version FROM schema_migrations")
    async with store.transaction() as tx:
        await tx.execute(OLD_ROW, ("a", "cron", "succeeded", "2026-01-01T00:00:00.000000Z"))
        await tx.execute(OLD_ROW, ("b", "manual", "failed", "2026-01-01T00:00:01.000000Z"))
    await store.close()

    monkeypatch.undo()
    store = await SqliteStore.open(path)
    try:
        rows = await store.fetchall("SELECT id, trigger, status FROM task_runs ORDER BY id")
        assert rows == [("a", "cron", "succeeded"), ("b", "manual", "failed")]
        async with store.transaction() as tx:
            duplicate = await tx.execute(
                OLD_ROW + " ON CONFLICT DO NOTHING",
                ("c", "backfill", "running", "2026-01-01T00:00:00.000000Z"),
            )
            skipped = await tx.execute(
                OLD_ROW, ("d", "catchup", "skipped", "2026-01-01T00:00:00.000000Z")
            )
        assert (duplicate, skipped) == (0, 1)  # one run per occurrence; a skip is no run
    finally:
        await store.close()
