"""Firing delayed jobs in priority order, as fast as their groups run them.

A ``JobDue`` in a stream keeps its place: once fired, a job waits behind every entry
fired before it, whatever its priority. So the order is decided before firing: a
group is given at most ``SLUICE_JOB_GROUP_BACKLOG`` fired jobs it has not run yet
(``job_slots``, one row per fired job, deleted in the run's transaction or when the
run is dead-lettered), and the due jobs beyond that wait in ``delayed_jobs``, where
the next firing picks the highest *effective* priority first.

Effective priority is the job's level plus one per ``SLUICE_JOB_PRIORITY_AGING_SECONDS``
it has been due, i.e. jobs go in the order of ``due_at - priority * aging``: a job is
never overtaken by one that fell due more than ``(9 - priority) * aging`` after it,
so a low one is never starved. Each job's due rows are read lane by lane (one seek of
``(job, priority, due_at)`` per level, in one statement), so a firing reads at most
ten times the room it fills, however many jobs wait.

The count is the database's, kept by the firing and the runs: it needs no Redis, and
a worker that died with jobs in hand holds their slots until its entries are
reclaimed and run. A slot whose run never comes (the group was removed) lapses after
``SLOT_LEASE``. Two schedulers firing at once on PostgreSQL may each fill the room they
saw: the bound is per firing, so a group may briefly hold twice it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import msgspec

from sluice.app.jobs import PRIORITIES, Job, next_due
from sluice.events import JobDue, uuid7
from sluice.scheduler.one_shots import POLL_S, Due
from sluice.store import Store, Tx
from sluice.store.users import db_time, from_db_time
from sluice.telemetry import tracing

SLOT_LEASE = timedelta(minutes=15)  # a fired job's slot, if its run never comes

_LANE = (
    "SELECT * FROM (SELECT job, key, priority, due_at FROM delayed_jobs"
    " WHERE job = ? AND priority = ? AND due_at <= ? ORDER BY due_at LIMIT ?) AS lane{}"
)


@dataclass(frozen=True)
class JobFlow:
    """The firing of the declared ``jobs``: at most ``backlog`` fired and not yet run per
    group, in order of effective priority (``aging`` per level)."""

    jobs: Mapping[str, str]  # job name -> the group that runs it
    backlog: int
    aging: timedelta

    @classmethod
    def of(cls, jobs: Iterable[Job[Any]], backlog: int, aging_seconds: float) -> JobFlow:
        """The flow of the loaded apps' jobs, with the deployment's settings."""
        return cls({job.name: job.group for job in jobs}, backlog, timedelta(seconds=aging_seconds))

    def due(self) -> Due:
        """What a ``OneShotRunner`` fires; a tick that fired nothing (every group full)
        waits a poll before looking again."""
        return Due("delayed jobs", next_due, self.fire_due, idle=POLL_S)

    async def fire_due(self, store: Store, now: datetime, limit: int) -> list[JobDue]:
        """Claim up to ``limit`` due jobs, each group's highest effective priority first
        and no more than its room, and append their ``JobDue`` events, in one
        transaction; the DELETE is the claim (a job fires once however many schedulers
        ask). The events fired, in the order they were picked."""
        async with store.transaction() as tx:
            held = await _held(tx, now)
            picked: list[tuple[str, str]] = []
            for group, jobs in self._by_group().items():
                room = min(self.backlog - held.get(group, 0), limit - len(picked))
                if room > 0:
                    picked += await self._pick(tx, jobs, now, room)
            if not picked:
                return []
            parents, fired = await self._claim(tx, picked, now)
            if fired:
                await _append(tx, fired, parents)
                await tx.executemany(
                    "INSERT INTO job_slots (event_id, group_name, fired_at) VALUES (?, ?, ?)",
                    [(e.event_id, self.jobs[e.job], db_time(now)) for e in fired],
                )
        return fired

    def _by_group(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for job, group in sorted(self.jobs.items()):
            groups.setdefault(group, []).append(job)
        return groups

    async def _pick(
        self, tx: Tx, jobs: list[str], now: datetime, room: int
    ) -> list[tuple[str, str]]:
        """The ``room`` due jobs of ``jobs`` that go first: by ``due_at - level * aging``."""
        due, sql = db_time(now), " UNION ALL ".join(_LANE.format(i) for i in PRIORITIES)
        ranked: list[tuple[datetime, str, str]] = []
        for job in jobs:
            params = [p for level in PRIORITIES for p in (job, level, due, room)]
            for name, key, level, due_at in await tx.fetchall(sql, params):
                rank = from_db_time(due_at) - int(level) * self.aging
                ranked.append((rank, str(name), str(key)))
        ranked.sort()
        return [(job, key) for _, job, key in ranked[:room]]

    async def _claim(
        self, tx: Tx, picked: list[tuple[str, str]], now: datetime
    ) -> tuple[list[str | None], list[JobDue]]:
        """The due jobs of ``picked`` removed, as their JobDue events, and the traceparent
        of the span that scheduled each (None with tracing off)."""
        order = {row: i for i, row in enumerate(picked)}
        rows = await tx.fetchall(
            "DELETE FROM delayed_jobs WHERE due_at <= ? AND (job, key) IN (VALUES "
            + ", ".join("(?, ?)" for _ in picked)
            + ") RETURNING job, key, due_at, payload, trace_id, priority, traceparent",
            [db_time(now), *(p for row in picked for p in row)],
        )
        rows.sort(key=lambda r: order[(str(r[0]), str(r[1]))])
        parents = [r[6] for r in rows]
        return parents, [
            JobDue(
                job=str(job),
                key=str(key),
                scheduled_for=from_db_time(due_at),
                payload=msgspec.Raw(bytes(payload)),
                trace_id=str(trace_id),
                priority=int(priority),
                event_id=uuid7(),
            )
            for job, key, due_at, payload, trace_id, priority, _ in rows
        ]


async def _append(tx: Tx, fired: list[JobDue], parents: list[str | None]) -> None:
    """Append ``fired``; with tracing on, each under the span that scheduled its job, so
    the job's run is in that request's trace (docs/guides/tracing.md)."""
    if not tracing.ENABLED:
        await tx.append(*fired)
        return
    for event, parent in zip(fired, parents, strict=True):
        with tracing.under(parent):
            await tx.append(event)


async def _held(tx: Tx, now: datetime) -> dict[str, int]:
    """Fired jobs each group has not run yet; lapsed slots are let go first."""
    # A lapsed slot a run is deleting just now is left to it, not waited for.
    await tx.execute(
        "DELETE FROM job_slots WHERE event_id IN (SELECT event_id FROM job_slots"
        " WHERE fired_at < ?" + tx.dialect.row_lock("update", skip_locked=True) + ")",
        (db_time(now - SLOT_LEASE),),
    )
    rows = await tx.fetchall("SELECT group_name, COUNT(*) FROM job_slots GROUP BY group_name")
    return {str(group): int(count) for group, count in rows}


async def release(tx: Tx, event_id: str) -> None:
    """The fired job ``event_id`` was run (in ``tx``) or given up on: its slot is free."""
    await tx.execute("DELETE FROM job_slots WHERE event_id = ?", (event_id,))


async def release_now(store: Store, event_id: str) -> None:
    """``release`` in a transaction of its own (a dead-lettered run)."""
    async with store.transaction() as tx:
        await release(tx, event_id)
