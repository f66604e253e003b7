"""Paused tasks (docs/guides/tasks.md): a paused task's occurrences do not run, on any replica.

A row of ``paused_tasks`` (migration 27), so a pause outlives every restart and
every replica sees it: the replica that claims an occurrence reads the table
(one primary-key read per occurrence) and, for a paused task, records the
occurrence ``skipped`` with the error ``paused`` instead of running it, so the
history shows what the pause left out. A run already going when the pause
comes finishes (cancel it to stop it). A manual run of a paused task is still
allowed: an operator who asks for one means it.
"""

from __future__ import annotations

from datetime import datetime

from sluice.store import Store
from sluice.store.users import db_time, from_db_time

PAUSED = "paused"


async def paused_tasks(store: Store) -> dict[str, datetime]:
    """Every paused task, with the time it was paused."""
    rows = await store.fetchall("SELECT name, paused_at FROM paused_tasks")
    return {str(name): from_db_time(at) for name, at in rows}


async def is_paused(store: Store, task: str) -> bool:
    row = await store.fetchone("SELECT 1 FROM paused_tasks WHERE name = ?", (task,))
    return row is not None


async def pause(store: Store, task: str, now: datetime) -> None:
    """Pause ``task`` (already paused: it stays so, since the first pause)."""
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO paused_tasks (name, paused_at) VALUES (?, ?)"
            " ON CONFLICT (name) DO NOTHING",
            (task, db_time(now)),
        )


async def resume(store: Store, task: str) -> None:
    async with store.transaction() as tx:
        await tx.execute("DELETE FROM paused_tasks WHERE name = ?", (task,))
