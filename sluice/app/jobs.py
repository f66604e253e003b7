"""Delayed jobs: "close the order in 15 minutes unless it is paid".

A job is scheduled inside the transaction that decides it (``Job.schedule(tx, ...)``):
one row of ``delayed_jobs`` per job name and key, committed with the state it is
about, or not at all. Scheduling a key again moves it; ``Job.cancel(tx, key)`` removes
it, in the transaction that makes it unneeded (the payment). Schedulers fire due jobs
(``sluice.scheduler.one_shots.DueRunner`` over ``fire_due`` below): one transaction
deletes the due rows and appends a ``JobDue`` event for each, so a job fires once
whatever the number of schedulers; its group then runs it exactly once, in a
transaction that records it as handled (``sluice.app.running``), with the group's
retries and dead letters.

A cancel that comes after the job fired finds nothing (``cancel`` answers False) and
the run still comes: a job's function checks the state it acts on in its own
transaction (the order is still open) rather than trusting that it was not cancelled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from sluice.events import TRACE, JobDue, new_trace_id, utcnow, uuid7
from sluice.store import Store, Tx
from sluice.store.users import db_time, from_db_time

if TYPE_CHECKING:
    from sluice.app.contexts import JobContext

P = TypeVar("P", bound=msgspec.Struct)

MAX_AHEAD = timedelta(days=366)  # a job further ahead than this is refused (a unit mix-up)


@dataclass(frozen=True)
class Job(Generic[P]):
    """A declared delayed job (``App.job``): its name, payload type, function and group."""

    name: str
    payload: type[P]
    run: Callable[[P, Tx, JobContext], Awaitable[None]]
    group: str

    async def schedule(
        self,
        tx: Tx,
        payload: P,
        *,
        key: str,
        at: datetime | None = None,
        delay: timedelta | None = None,
    ) -> datetime:
        """Run this job with ``payload`` at ``at`` (aware) or after ``delay``, once; the
        job of the same ``key`` scheduled before is replaced. Commits with ``tx``. The
        instant it falls due."""
        if not isinstance(payload, self.payload):
            raise TypeError(f"job {self.name!r} takes {self.payload.__name__}, not {payload!r}")
        if (at is None) == (delay is None):
            raise ValueError("give either at or delay")
        now = utcnow()
        due = now + delay if delay is not None else at
        assert due is not None
        if due.tzinfo is None:
            raise ValueError("at must be timezone-aware")
        if due - now > MAX_AHEAD:
            raise ValueError(f"a job at most {MAX_AHEAD.days} days ahead, not {due.isoformat()}")
        await tx.execute(
            "INSERT INTO delayed_jobs (job, key, due_at, payload, trace_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job, key) DO UPDATE SET"
            " due_at = excluded.due_at, payload = excluded.payload,"
            " trace_id = excluded.trace_id, created_at = excluded.created_at",
            (
                self.name,
                key,
                db_time(due),
                msgspec.json.encode(payload),
                TRACE.get() or new_trace_id(),
                db_time(now),
            ),
        )
        return due

    async def cancel(self, tx: Tx, key: str) -> bool:
        """Remove the pending job of ``key``, with ``tx``; False when there was none (never
        scheduled, cancelled, or already fired: its run checks the state it acts on)."""
        removed = await tx.execute(
            "DELETE FROM delayed_jobs WHERE job = ? AND key = ?", (self.name, key)
        )
        return removed > 0

    def decode(self, event: JobDue) -> P:
        """The payload the job was scheduled with, decoded as the job's payload type."""
        return msgspec.json.decode(event.payload, type=self.payload)


async def pending(store: Store, job: str, key: str) -> datetime | None:
    """When the pending job of ``job`` and ``key`` falls due; None when none is pending."""
    row = await store.fetchone(
        "SELECT due_at FROM delayed_jobs WHERE job = ? AND key = ?", (job, key)
    )
    return None if row is None else from_db_time(row[0])


async def next_due(store: Store) -> datetime | None:
    """The earliest pending job's instant (one seek of the due index)."""
    row = await store.fetchone("SELECT due_at FROM delayed_jobs ORDER BY due_at LIMIT 1")
    return None if row is None else from_db_time(row[0])


async def fire_due(store: Store, now: datetime, limit: int) -> list[Any]:
    """Claim up to ``limit`` jobs due at ``now``, earliest first, and append their
    ``JobDue`` events, in one transaction: the DELETE is the claim, so a job fires once
    however many schedulers ask (PostgreSQL: the picking subquery skips rows another
    replica locked). The events fired."""
    async with store.transaction() as tx:
        due = db_time(now)
        rows = await tx.fetchall(
            "DELETE FROM delayed_jobs WHERE (job, key) IN ("
            " SELECT job, key FROM delayed_jobs WHERE due_at <= ? ORDER BY due_at LIMIT ?"
            + tx.dialect.row_lock("update", skip_locked=True)
            + ")"
            " AND due_at <= ? RETURNING job, key, due_at, payload, trace_id",
            (due, limit, due),
        )
        fired = [
            JobDue(
                job=str(job),
                key=str(key),
                scheduled_for=from_db_time(due_at),
                payload=msgspec.Raw(bytes(payload)),
                trace_id=str(trace_id),
                event_id=uuid7(),
            )
            for job, key, due_at, payload, trace_id in sorted(rows, key=lambda r: str(r[2]))
        ]
        if fired:
            await tx.append(*fired)
    return fired
