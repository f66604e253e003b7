"""Run records: one row per run of a task, cron or manual, in the database.

An occurrence has at most one run (a unique index on task and ``scheduled_for``
for every trigger but manual, skipped records aside), so the database refuses a
second run of the same occurrence even when its Redis claim was lost with a Redis
restart, and a backfill never runs again an occurrence that ran. An occurrence
that did not run (its overlap policy, a pause) gets a ``skipped`` record, so the
history shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import msgspec

from sluice.events import TaskRunFinished
from sluice.store.base import Row, Store
from sluice.store.users import db_time, from_db_time, optional_db_time

Trigger = Literal["cron", "manual", "catchup", "backfill"]
Status = Literal["running", "succeeded", "failed", "cancelled", "skipped"]
TRIGGERS: tuple[Trigger, ...] = ("cron", "manual", "catchup", "backfill")
STATUSES: tuple[Status, ...] = ("running", "succeeded", "failed", "cancelled", "skipped")

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
        id=row[0],
        task=row[1],
        trigger=row[2],
        status=row[3],
        scheduled_for=from_db_time(row[4]),
        started_at=from_db_time(row[5]),
        finished_at=optional_db_time(row[6]),
        cursor=row[7],
        error=row[8],
        trace_id=row[9],
    )


async def start(store: Store, record: RunRecord, holder: str) -> bool:
    """Insert a ``running`` record; False when this cron occurrence already has one."""
    async with store.transaction() as tx:
        inserted = await tx.execute(
            f"INSERT INTO task_runs ({_COLUMNS}, holder) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (
                record.id,
                record.task,
                record.trigger,
                record.status,
                db_time(record.scheduled_for),
                db_time(record.started_at),
                None,
                record.cursor,
                None,
                record.trace_id,
                holder,
            ),
        )
    return inserted == 1


async def skipped(store: Store, record: RunRecord, holder: str, reason: str) -> bool:
    """Record an occurrence that did not run; False when it already has a record (a
    replica whose clock is behind reached it after another one had decided)."""
    async with store.transaction() as tx:
        inserted = await tx.execute(
            f"INSERT INTO task_runs ({_COLUMNS}, holder)"
            " SELECT ?, ?, ?, 'skipped', ?, ?, ?, NULL, ?, ?, ?"
            " WHERE NOT EXISTS (SELECT 1 FROM task_runs WHERE task = ? AND scheduled_for = ?"
            " AND trigger != 'manual')",
            (
                record.id,
                record.task,
                record.trigger,
                db_time(record.scheduled_for),
                db_time(record.started_at),
                db_time(record.started_at),
                reason,
                record.trace_id,
                holder,
                record.task,
                db_time(record.scheduled_for),
            ),
        )
    return inserted == 1


async def abandon_stale(
    store: Store, task: str, now: datetime, only: Sequence[str] | None = None
) -> int:
    """Mark ``running`` records of ``task`` as failed: every one, or those in ``only``.

    Called by the holder of the task's lock before it records its own run: while
    it holds the lock no other run of the task is alive, so a ``running`` record
    belongs to a process that died (its lock expired). Cursors stay, for the next
    run to resume from. Under ``allow_all`` runs hold a lock each, and the caller
    names the records whose lock is gone (``only``).
    """
    ids = "" if only is None else f" AND id IN ({', '.join('?' * len(only))})"
    if only is not None and not only:
        return 0
    async with store.transaction() as tx:
        return await tx.execute(
            "UPDATE task_runs SET status = 'failed', finished_at = ?, error = ?"
            f" WHERE task = ? AND status = 'running'{ids}",
            (db_time(now), ABANDONED, task, *(only or ())),
        )


async def running(store: Store, task: str) -> list[RunRecord]:
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM task_runs WHERE task = ? AND status = 'running'", (task,)
    )
    return [_record(row) for row in rows]


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
                run_id=record.id,
                task=record.task,
                trigger=record.trigger,
                status=status,
                scheduled_for=record.scheduled_for,
                error=error,
                trace_id=record.trace_id,
            )
        )


async def resume_cursor(store: Store, task: str) -> str | None:
    """The cursor to resume from: the newest run's, if it failed, died or was cancelled
    midway (skipped records never ran and do not count)."""
    row = await store.fetchone(
        "SELECT status, cursor FROM task_runs WHERE task = ?"
        " AND status NOT IN ('running', 'skipped') ORDER BY id DESC LIMIT 1",
        (task,),
    )
    if row is None or row[0] not in ("failed", "cancelled"):
        return None
    return str(row[1]) if row[1] is not None else None


async def get(store: Store, run_id: str) -> RunRecord | None:
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM task_runs WHERE id = ?", (run_id,))
    return _record(row) if row else None


async def newest(
    store: Store, task: str, limit: int, *, status: str | None = None, trigger: str | None = None
) -> list[RunRecord]:
    """Run records of ``task``, newest first (run ids are UUIDv7: ordered by start),
    of one status and one trigger when given."""
    where, params = "task = ?", [task]
    for column, value in (("status", status), ("trigger", trigger)):
        if value is not None:
            where += f" AND {column} = ?"
            params.append(value)
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM task_runs WHERE {where} ORDER BY id DESC LIMIT ?",
        (*params, limit),
    )
    return [_record(row) for row in rows]


async def recorded(store: Store, task: str, slots: Sequence[datetime]) -> set[datetime]:
    """Those of ``slots`` that have a record (a run or a skip), whatever its trigger
    but manual."""
    found: set[datetime] = set()
    for start in range(0, len(slots), 500):  # under every backend's parameter limit
        chunk = slots[start : start + 500]
        rows = await store.fetchall(
            "SELECT scheduled_for FROM task_runs WHERE task = ? AND trigger != 'manual'"
            f" AND scheduled_for IN ({', '.join('?' * len(chunk))})",
            (task, *(db_time(slot) for slot in chunk)),
        )
        found.update(from_db_time(row[0]) for row in rows)
    return found
