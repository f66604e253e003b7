"""One run of a task, cron or manual, through one code path.

``begin`` takes the task's lock (``SET NX PX`` with a random token) and writes
the ``running`` record; ``execute`` runs the task's function while a watchdog
renews the lock every third of its TTL, then records the outcome. A run whose
lock cannot be renewed is cancelled and recorded as failed; an exception in a
task is logged with the run's trace id and stored on its record, and never
escapes.

Under the ``allow_all`` overlap policy the lock is the occurrence's, not the
task's, so runs of different occurrences overlap. A run also stops when it is
cancelled (``POST .../runs/{id}/cancel``, or a newer occurrence under
``cancel_other``: a signal polled through ``sluice.records.cancel``), recorded
``cancelled``, and when it outlives the task's timeout, recorded ``failed`` with
an error that starts with ``deadline``. Either way its lock goes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import msgspec
import structlog

from sluice.aio.lock import RedisLock
from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait
from sluice.events import TRACE, new_trace_id, utcnow, uuid7
from sluice.process.resources import Resources
from sluice.records.cancel import CancelWatch, forget_signal
from sluice.scheduler import runs
from sluice.scheduler.task_spec import LockLost, Task, TaskContext
from sluice.telemetry import run_spans, tracing
from sluice.telemetry.prometheus import LOCK_LOSSES, LOCK_RELEASES_GONE, TASK_RUNS

log = structlog.get_logger(__name__)

LOST_LOCK = "lost its lock (renewal failed); stopped"
INTERRUPTED = "interrupted: the process running it was asked to stop"
CANCELLED = "cancelled on request (an operator, or a newer occurrence under cancel_other)"
CANCEL_KIND = "task-run"
ERROR_LIMIT = 4000


class Busy(Exception):
    """A run of the task is in progress somewhere (its lock is held)."""


class AlreadyRan(Exception):
    """This cron occurrence already has a run record."""


@dataclass
class Run:
    task: Task
    lock: RedisLock
    context: TaskContext

    @property
    def record(self) -> runs.RunRecord:
        return self.context.run


class Runner:
    def __init__(
        self,
        resources: Resources,
        *,
        holder: str,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.resources = resources
        self.holder = holder
        self.clock = clock
        self.ttl_ms = resources.config.task_lock_ttl_ms

    async def begin(self, task: Task, trigger: runs.Trigger, scheduled_for: datetime) -> Run:
        """Take the lock and record the run; raises ``Busy`` or ``AlreadyRan``.

        Redis errors propagate: without Redis there is no lock, so no run.
        """
        lock = RedisLock(self.resources.redis, self.lock_key(task, scheduled_for), self.ttl_ms)
        if not await lock.acquire():
            raise Busy(task.name)
        try:
            store = self.resources.store
            now = self.clock()
            abandoned = await runs.abandon_stale(store, task.name, now, await self._dead_runs(task))
            if abandoned:
                log.warning(
                    "task: earlier runs died without finishing", task=task.name, records=abandoned
                )
            cursor = await runs.resume_cursor(store, task.name)
            record = runs.RunRecord(
                id=uuid7(),
                task=task.name,
                trigger=trigger,
                status="running",
                scheduled_for=scheduled_for,
                started_at=now,
                cursor=cursor,
                trace_id=new_trace_id(),
            )
            if not await runs.start(store, record, self.holder):
                raise AlreadyRan(task.name)
        except BaseException:
            with contextlib.suppress(*REDIS_DOWN):
                await lock.release()
            raise
        return Run(task, lock, TaskContext(self.resources, record, cursor))

    def lock_key(self, task: Task, scheduled_for: datetime) -> str:
        """The task's lock; the occurrence's own under ``allow_all``."""
        key = self.resources.keys.task_lock(task.name)
        if task.policy.overlap == "allow_all":
            return f"{key}:{scheduled_for.strftime('%Y%m%dT%H%M%S.%fZ')}"
        return key

    async def _dead_runs(self, task: Task) -> list[str] | None:
        """Under ``allow_all``, the ``running`` records whose lock is gone (their process
        died); else None: holding the task's lock, every ``running`` record is dead."""
        if task.policy.overlap != "allow_all":
            return None
        dead = []
        for record in await runs.running(self.resources.store, task.name):
            if not await self.resources.redis.exists(self.lock_key(task, record.scheduled_for)):
                dead.append(record.id)
        return dead

    async def skip(
        self, task: Task, trigger: runs.Trigger, scheduled_for: datetime, reason: str
    ) -> bool:
        """Record that this occurrence did not run, and why; False if it had a record."""
        now = self.clock()
        record = runs.RunRecord(
            id=uuid7(),
            task=task.name,
            trigger=trigger,
            status="skipped",
            scheduled_for=scheduled_for,
            started_at=now,
            finished_at=now,
            error=reason,
            trace_id=new_trace_id(),
        )
        return await runs.skipped(self.resources.store, record, self.holder, reason)

    async def execute(self, run: Run) -> runs.RunRecord:
        """Run the task under its lock and record the outcome; never raises (but cancels).
        With tracing on, the run is a span of its own (``sluice.telemetry.run_spans``)."""
        span = run_spans.TaskRun(run.record) if tracing.ENABLED else None
        token = TRACE.set(run.record.trace_id)  # what the task appends joins the run's trace
        final = None
        try:
            final = await self._execute(run)
            return final
        finally:
            TRACE.reset(token)
            if span is not None:  # no record returned: interrupted, the process is stopping
                span.end(*((final.status, final.error) if final else ("failed", INTERRUPTED)))

    async def _execute(self, run: Run) -> runs.RunRecord:
        record = run.record
        with structlog.contextvars.bound_contextvars(
            trace_id=record.trace_id, task=record.task, run_id=record.id
        ):
            log.info(
                "task run started",
                trigger=record.trigger,
                scheduled_for=record.scheduled_for.isoformat(),
                resume_from=record.cursor,
            )
            started = time.monotonic()
            watchdog = asyncio.create_task(self._watchdog(run), name=f"watchdog:{run.task.name}")
            try:
                status, error = await self._supervise(run)
            except asyncio.CancelledError:  # the process is stopping
                await asyncio.shield(self._conclude(run, watchdog, "failed", INTERRUPTED))
                raise
            elapsed = round(time.monotonic() - started, 3)
            final = await self._conclude(run, watchdog, status, error)
            if status == "succeeded":
                log.info("task run succeeded", seconds=elapsed, checkpoints=run.context.checkpoints)
            elif status == "cancelled":
                log.warning("task run cancelled", seconds=elapsed)
            else:
                log.error("task run failed", seconds=elapsed, error=error)
            return final

    async def _supervise(self, run: Run) -> tuple[runs.Status, str | None]:
        context = run.context
        work = asyncio.create_task(run.task.run(context), name=f"task:{run.task.name}")
        lost = asyncio.create_task(context.lost.wait())
        cancel = asyncio.create_task(self._watch(context.run.id).wait())
        timeout = run.task.policy.timeout_seconds
        try:
            await asyncio.wait(
                {work, lost, cancel}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            await cancel_and_wait(work)  # the process is stopping: stop the task too
            raise
        finally:
            lost.cancel()
            await cancel_and_wait(cancel)
        if not work.done():
            await cancel_and_wait(work)
            if context.lost.is_set():
                LOCK_LOSSES.labels(run.task.name).inc()
                return "failed", LOST_LOCK
            if cancel.done() and not cancel.cancelled():
                await forget_signal(
                    self.resources.redis, self.resources.keys, CANCEL_KIND, context.run.id
                )
                return "cancelled", CANCELLED
            return "failed", f"deadline: ran past its timeout of {timeout:g} s; stopped"
        if work.cancelled():
            return "failed", "cancelled"
        exc = work.exception()
        if exc is None:
            return "succeeded", None
        if isinstance(exc, LockLost):
            LOCK_LOSSES.labels(run.task.name).inc()
            return "failed", LOST_LOCK
        log.error("task raised", exc_info=exc)
        if tracing.ENABLED:
            run_spans.task_raised(exc)
        return "failed", _describe(exc)

    def _watch(self, run_id: str) -> CancelWatch:
        async def never_recorded() -> bool:
            # The signal is the only record: a run whose Redis is down loses its lock anyway.
            return False

        return CancelWatch(
            self.resources.redis, self.resources.keys, CANCEL_KIND, run_id, never_recorded
        )

    async def _watchdog(self, run: Run) -> None:
        """Renew the lock every third of its TTL; on losing it, tell the run to stop."""
        interval = self.ttl_ms / 3000
        valid_until = time.monotonic() + self.ttl_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                renewed: bool | None = await run.lock.renew()
            except REDIS_DOWN as exc:
                log.warning("task lock renewal failed, retrying", error=repr(exc))
                renewed = None
            if renewed:
                valid_until = time.monotonic() + self.ttl_ms / 1000
                continue
            # Not renewed: gone for sure (False), or unknown and about to expire.
            if renewed is False or time.monotonic() + interval >= valid_until:
                log.error("task lock lost", lock=run.lock.key)
                run.context.lost.set()
                return

    async def _release(self, run: Run) -> None:
        try:
            released = await run.lock.release()
        except REDIS_DOWN as exc:
            log.warning("task lock release failed; it expires on its own", error=repr(exc))
            return
        if not released:
            LOCK_RELEASES_GONE.labels(run.task.name).inc()
            log.error("task lock was already gone at release", lock=run.lock.key)

    async def _conclude(
        self,
        run: Run,
        watchdog: asyncio.Task[None],
        status: runs.Status,
        error: str | None,
    ) -> runs.RunRecord:
        """Record the outcome, then stop renewing the lock and give it back. In that order:
        the next holder marks every record still "running" as abandoned and resumes from
        it, so the lock stays held (and renewed) until the outcome is written."""
        try:
            return await self._finish(run, status, error)
        finally:
            await cancel_and_wait(watchdog)
            if not run.context.lost.is_set():  # a lost lock is not ours to release
                await self._release(run)

    async def _finish(self, run: Run, status: runs.Status, error: str | None) -> runs.RunRecord:
        TASK_RUNS.labels(run.task.name, status).inc()
        now = self.clock()
        record = run.record
        try:
            await runs.finish(self.resources.store, record, status, now, error)
        except Exception:
            # The record stays "running"; the next holder of the lock marks it abandoned.
            log.exception("task: could not record the outcome", status=status)
        return msgspec.structs.replace(
            record, status=status, finished_at=now, cursor=run.context.cursor, error=error
        )


def _describe(exc: BaseException) -> str:
    """The error stored on a run record: type, message and where it was raised."""
    text = "".join(traceback.format_exception_only(exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    return text[:ERROR_LIMIT]
