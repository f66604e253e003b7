"""Run records: one row per run of a task, cron or manual, in the database.

A cron occurrence has at most one record (a unique index on task and
``scheduled_for`` for cron runs), so the database refuses a second run of the
same occurrence even when its Redis claim was lost with a Redis restart.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from sluice.events import TaskRunFinished
from sluice.store.base import Row, Store
from sluice.store.users import db_time, from_db_time, optional_db_time

Trigger = Literal["cron", "manual"]
Status = Literal["running", "succeeded", "failed"]

ABANDONED = "abandoned: its process stopped before the run finished (lock expired)"


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    task: str
    trigger: str
    status: str
    scheduled_for: datetime
    started_at: datetime
    finished_at: datetime | None = None
    cursor: str | None = None
    error: str | None = None
    trace_id: str


_COLUMNS = (
    "id, task, trigger, status, scheduled_for, started_at, finished_at, cursor, error, trace_id"
)


def _record(row: Row) -> RunRecord:
    return RunRecord(
        id=row[0], task=row[1], trigger=row[2], status=row[3],
        scheduled_for=from_db_time(row[4]), started_at=from_db_time(row[5]),
        finished_at=optional_db_time(row[6]),
        cursor=row[7], error=row[8], trace_id=row[9],
    )  # fmt: skip


async def start(store: Store, record: RunRecord, holder: str) -> bool:
    """Insert a ``running`` record; False when this cron occurrence already has one."""
    async with store.transaction() as tx:
        inserted = await tx.execute(
            f"INSERT INTO task_runs ({_COLUMNS}, holder) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (
                record.id, record.task, record.trigger, record.status,
                db_time(record.scheduled_for), db_time(record.started_at), None,
                record.cursor, None, record.trace_id, holder,
            ),
        )  # fmt: skip
    return inserted == 1


async def abandon_stale(store: Store, task: str, now: datetime) -> int:
    """Mark every ``running`` record of ``task`` as failed.

    Called by the holder of the task's lock before it records its own run: while
    it holds the lock no other run of the task is alive, so a ``running`` record
    belongs to a process that died (its lock expired). Cursors stay, for the next
    run to resume from.
    """
    async with store.transaction() as tx:
        return await tx.execute(
            "UPDATE task_runs SET status = 'failed', finished_at = ?, error = ?"
            " WHERE task = ? AND status = 'running'",
            (db_time(now), ABANDONED, task),
        )


async def save_cursor(store: Store, run_id: str, cursor: str) -> None:
    async with store.transaction() as tx:
        await tx.execute("UPDATE task_runs SET cursor = ? WHERE id = ?", (cursor, run_id))


async def finish(
    store: Store, record: RunRecord, status: Status, now: datetime, error: str | None = None
) -> None:
    """Record the outcome and append ``TaskRunFinished`` in the same transaction."""
    async with store.transaction() as tx:
        await tx.execute(
            "UPDATE task_runs SET status = ?, finished_at = ?, error = ? WHERE id = ?",
            (status, db_time(now), error, record.id),
        )
        await tx.append(
            TaskRunFinished(
                run_id=record.id, task=record.task, trigger=record.trigger, status=status,
                scheduled_for=record.scheduled_for, error=error, trace_id=record.trace_id,
            )
        )  # fmt: skip


async def resume_cursor(store: Store, task: str) -> str | None:
    """The cursor to resume from: the newest run's, if it failed (or died) midway."""
    row = await store.fetchone(
        "SELECT status, cursor FROM task_runs WHERE task = ? AND status != 'running'"
        " ORDER BY id DESC LIMIT 1",
        (task,),
    )
    if row is None or row[0] != "failed":
        return None
    return str(row[1]) if row[1] is not None else None


async def get(store: Store, run_id: str) -> RunRecord | None:
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM task_runs WHERE id = ?", (run_id,))
    return _record(row) if row else None


async def newest(store: Store, task: str, limit: int) -> list[RunRecord]:
    """Run records of ``task``, newest first (run ids are UUIDv7: ordered by start)."""
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM task_runs WHERE task = ? ORDER BY id DESC LIMIT ?",
        (task, limit),
    )
    return [_record(row) for row in rows]
