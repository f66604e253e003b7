"""Delayed jobs: "close the order in 15 minutes unless it is paid".

A job is scheduled inside the transaction that decides it (``Job.schedule(tx, ...)``):
one row of ``delayed_jobs`` per job name and key, committed with the state it is
about, or not at all. Scheduling a key again moves it; ``Job.cancel(tx, key)`` removes
it, in the transaction that makes it unneeded (the payment). Schedulers fire due jobs
(``sluice.scheduler.one_shots.OneShotRunner`` over ``sluice.app.job_flow``): one
transaction deletes the due rows and appends a ``JobDue`` event for each, so a job fires once
whatever the number of schedulers; its group then runs it exactly once, in a
transaction that records it as handled (``sluice.app.running``), with the group's
retries and dead letters.

Jobs take priorities and debounce (docs/concepts/job-flow.md): a row holds its priority
(``PRIORITIES``, highest first when a group has a backlog: ``sluice.app.job_flow``) and
when its key was first scheduled, so a job given ``debounce`` moves to now + debounce
at each scheduling but never past the first one + ``max_wait``.

A cancel that comes after the job fired finds nothing (``cancel`` answers False) and
the run still comes: a job's function checks the state it acts on in its own
transaction (the order is still open) rather than trusting that it was not cancelled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Generic, TypeVar

import msgspec

from sluice.events import TRACE, JobDue, new_trace_id, utcnow
from sluice.store import Store, Tx
from sluice.store.users import db_time, from_db_time
from sluice.telemetry import tracing

if TYPE_CHECKING:
    from sluice.app.contexts import JobContext

P = TypeVar("P", bound=msgspec.Struct)

MAX_AHEAD = timedelta(days=366)  # a job further ahead than this is refused (a unit mix-up)


PRIORITIES = range(10)  # 0 (lowest) .. 9 (most urgent)
DEFAULT_PRIORITY = 5


def check_priority(priority: int) -> int:
    if type(priority) is not int or priority not in PRIORITIES:
        raise ValueError(f"a job's priority is an int from 0 to 9, not {priority!r}")
    return priority


def flow_options(
    what: str, priority: int, debounce: timedelta | None, max_wait: timedelta | None
) -> tuple[int, timedelta | None, timedelta | None]:
    """A job's priority, debounce and max_wait, checked when it is declared."""
    try:
        check_priority(priority)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    for option, span in (("debounce", debounce), ("max_wait", max_wait)):
        if span is not None and not (timedelta() < span <= MAX_AHEAD):
            raise ValueError(f"{what}: {option} is a positive timedelta, not {span!r}")
    if debounce is not None and max_wait is not None and max_wait < debounce:
        raise ValueError(f"{what}: max_wait {max_wait} is shorter than debounce {debounce}")
    return priority, debounce, max_wait


@dataclass(frozen=True)
class Job(Generic[P]):
    """A declared delayed job (``App.job``): its name, payload type, function and group,
    its default priority, its debounce window and longest wait, and the key of its runs
    for the group's flow control, if any."""

    name: str
    payload: type[P]
    run: Callable[[P, Tx, JobContext], Awaitable[None]]
    group: str
    priority: int = DEFAULT_PRIORITY
    debounce: timedelta | None = None
    max_wait: timedelta | None = None
    # The key of a run for its group's flow control (``App.job``'s ``flow_key``).
    flow_key: Callable[[P], str | None] | None = None

    async def schedule(
        self,
        tx: Tx,
        payload: P,
        *,
        key: str,
        at: datetime | None = None,
        delay: timedelta | None = None,
        priority: int | None = None,
    ) -> datetime:
        """Run this job with ``payload`` at ``at`` (aware) or after ``delay`` (a job
        declared with ``debounce``: after that, when neither is given), once; the job of
        the same ``key`` scheduled before is replaced, and with ``max_wait`` falls due no
        later than ``max_wait`` after the key was first scheduled. ``priority``: 0..9,
        the job's own when None. Commits with ``tx``. The instant it falls due."""
        if not isinstance(payload, self.payload):
            raise TypeError(f"job {self.name!r} takes {self.payload.__name__}, not {payload!r}")
        if at is None and delay is None:
            delay = self.debounce
        if (at is None) == (delay is None):
            raise ValueError("give either at or delay")
        level = self.priority if priority is None else check_priority(priority)
        now = utcnow()
        due = now + delay if delay is not None else at
        assert due is not None
        if due.tzinfo is None:
            raise ValueError("at must be timezone-aware")
        if due - now > MAX_AHEAD:
            raise ValueError(f"a job at most {MAX_AHEAD.days} days ahead, not {due.isoformat()}")
        first = now
        if self.max_wait is not None:
            first = await first_scheduled(tx, self.name, key) or now
            due = min(due, max(first + self.max_wait, now))
        await tx.execute(
            "INSERT INTO delayed_jobs"
            " (job, key, due_at, payload, trace_id, created_at, priority, first_at, traceparent)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job, key) DO UPDATE SET"
            " due_at = excluded.due_at, payload = excluded.payload,"
            " trace_id = excluded.trace_id, created_at = excluded.created_at,"
            " traceparent = excluded.traceparent,"
            " priority = excluded.priority,"
            " first_at = COALESCE(delayed_jobs.first_at, delayed_jobs.created_at)",
            (
                self.name,
                key,
                db_time(due),
                msgspec.json.encode(payload),
                TRACE.get() or new_trace_id(),
                db_time(now),
                level,
                db_time(first),
                # the scheduling span: its JobDue event's parent (docs/guides/tracing.md)
                tracing.current_traceparent() if tracing.ENABLED else None,
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


async def first_scheduled(tx: Tx, job: str, key: str) -> datetime | None:
    """When the pending job of ``job`` and ``key`` was first scheduled (an older
    release's row: when it was last scheduled); None when none is pending."""
    row = await tx.fetchone(
        "SELECT COALESCE(first_at, created_at) FROM delayed_jobs WHERE job = ? AND key = ?"
        + tx.dialect.row_lock("update"),
        (job, key),
    )
    return None if row is None else from_db_time(row[0])


async def next_due(store: Store) -> datetime | None:
    """The earliest pending job's instant (one seek of the due index)."""
    row = await store.fetchone("SELECT due_at FROM delayed_jobs ORDER BY due_at LIMIT 1")
    return None if row is None else from_db_time(row[0])
