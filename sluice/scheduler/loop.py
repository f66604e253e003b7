"""The scheduler loop: every replica follows every task; each occurrence runs once.

For each occurrence (task, slot), where the slot is the occurrence's instant in
UTC computed from the schedule alone, every replica wakes at the slot and
tries ``SET <task>:slot:<slot> NX``. The replica that wins takes the task's run
lock and writes the run record, whose unique index on (task, scheduled_for) is
the last word when Redis lost the claim in a restart. Clock skew between
replicas only changes who wins, never how many run. An occurrence that finds a
run of the task still in progress follows the task's overlap policy
(sluice/scheduler/overlap.py); by default it is skipped, not queued.

"In progress" is as this replica's clock sees it, so a replica that finds the
lock busy gives its claim back before it skips: under skew, a replica whose
clock runs 0.8 s ahead reaches an occurrence 0.8 s of true time early and can
find the run before it (begun on time elsewhere) still holding the lock,
although by the true clock that run ends before this occurrence is due.
Keeping the claim would lose the occurrence on every replica; given back, the
next replica to reach the occurrence by its own clock tries again and runs it
if the lock is free by then. A task that really overruns its period is still
skipped: every replica finds its lock busy, and ``CONFIRM_SKIP_S`` after the
occurrence, when every replica has reached it, the first to claim it again
records it ``skipped`` (a record, so the history shows it).

A task's jitter delays each occurrence by the same amount on every replica (a
hash of the task and the slot), before the claim, so it still runs once. A
paused task's occurrences are recorded ``skipped`` (sluice/scheduler/pauses.py).
At start, a task with a catch-up window runs the occurrences it missed
(sluice/scheduler/catchup.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any

import structlog

from sluice.aio.lock import RedisLock
from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait, wait_or_stop
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.scheduler import overlap, runs
from sluice.scheduler.catchup import catch_up
from sluice.scheduler.overlap import Skipped
from sluice.scheduler.pauses import PAUSED, is_paused
from sluice.scheduler.policy import jitter
from sluice.scheduler.runner import AlreadyRan, Busy, Runner
from sluice.scheduler.task_spec import Task
from sluice.telemetry.prometheus import TASK_SKIPPED

log = structlog.get_logger(__name__)

# Long past any clock skew between replicas; the run record's unique index stays the backstop.
OCCURRENCE_CLAIM_MS = 10 * 60 * 1000
# An occurrence noticed later than this (a suspended host, a stalled loop) is skipped.
MAX_LATENESS_S = 60.0
# Sleep in slices, so a wall-clock jump is noticed within one.
SLEEP_SLICE_S = 30.0


def default_holder() -> str:
    """Names this scheduler in run records and claims; unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def slot_id(slot: datetime) -> str:
    return slot.strftime("%Y%m%dT%H%M%S.%fZ")


class Scheduler:
    def __init__(
        self,
        resources: Resources,
        tasks: Sequence[Task],
        *,
        holder: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.resources = resources
        self.tasks = list(tasks)
        self.holder = holder or default_holder()
        self.clock = clock
        self.runner = Runner(resources, holder=self.holder, clock=clock)
        self._runs: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        log.info(
            "scheduler started",
            holder=self.holder,
            tasks=[f"{t.name}: {t.schedule.describe()}" for t in self.tasks],
        )
        started = self.clock()
        followers = [
            asyncio.create_task(self._follow(task, stop, started), name=f"follow:{task.name}")
            for task in self.tasks
        ]
        for task in self.tasks:
            if task.policy.catchup_seconds > 0:
                self._spawn(catch_up(self.resources, task, started, self.holder, self.occurrence))
        try:
            await stop.wait()
        finally:
            for follower in followers:
                await cancel_and_wait(follower)
            # Runs in progress stop and are recorded as interrupted; their locks go back.
            for run in list(self._runs):
                await cancel_and_wait(run)
        log.info("scheduler stopped", holder=self.holder)

    async def _follow(self, task: Task, stop: asyncio.Event, after: datetime) -> None:
        while not stop.is_set():
            slot = task.schedule.next_after(after)
            if slot is None:
                log.info("task has no more occurrences", task=task.name)
                return
            await self._sleep_until(slot, stop)
            if stop.is_set():
                return
            late = (self.clock() - slot).total_seconds()
            if late > MAX_LATENESS_S:
                log.warning(
                    "occurrence missed: noticed too late",
                    task=task.name,
                    scheduled_for=slot.isoformat(),
                    late_seconds=round(late, 1),
                )
                after = self.clock()
                continue
            after = slot
            self._spawn(self.occurrence(task, slot))

    async def _sleep_until(self, moment: datetime, stop: asyncio.Event) -> None:
        while not stop.is_set():
            remaining = (moment - self.clock()).total_seconds()
            if remaining <= 0:
                return
            await wait_or_stop(stop, min(remaining, SLEEP_SLICE_S))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        run = asyncio.create_task(coro)
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    async def occurrence(self, task: Task, slot: datetime, trigger: runs.Trigger = "cron") -> None:
        """Claim the occurrence and, if this replica won it, run it. Never raises."""
        fields = {"task": task.name, "scheduled_for": slot.isoformat(), "trigger": trigger}
        delay = jitter(task.policy, task.name, slot)
        if delay and trigger == "cron":
            await asyncio.sleep(max(0.0, (slot + delay - self.clock()).total_seconds()))
        key = self.resources.keys.task_occurrence(task.name, slot_id(slot))
        # Given back by compare-and-delete, should the task's lock be busy (see above).
        claim = RedisLock(self.resources.redis, key, OCCURRENCE_CLAIM_MS, token=self.holder)
        try:
            claimed = await self.resources.redis.set(
                key, self.holder, nx=True, px=OCCURRENCE_CLAIM_MS
            )
        except REDIS_DOWN as exc:
            log.warning("occurrence skipped: Redis unavailable", error=repr(exc), **fields)
            return
        if not claimed:
            return  # another replica has it
        try:
            if await is_paused(self.resources.store, task.name):
                await self._skip(task, trigger, slot, PAUSED)
                return
            run = await overlap.begin(self.runner, task, trigger, slot)
        except Skipped as skipped:
            await self._skip(task, trigger, slot, str(skipped))
            return
        except Busy:
            TASK_SKIPPED.labels(task.name).inc()
            log.warning("occurrence skipped: the previous run is still in progress", **fields)
            with contextlib.suppress(*REDIS_DOWN):  # kept, it only stops the others trying
                await claim.release()  # a replica whose clock is behind may find it free
            await self._confirm_skip(task, trigger, slot, claim)
            return
        except AlreadyRan:
            log.info("occurrence already has a run record", **fields)
            return
        except REDIS_DOWN as exc:
            log.warning("occurrence skipped: Redis unavailable", error=repr(exc), **fields)
            return
        except Exception:
            log.exception("occurrence skipped: could not start the run", **fields)
            return
        await self.runner.execute(run)

    async def _confirm_skip(
        self, task: Task, trigger: runs.Trigger, slot: datetime, claim: RedisLock
    ) -> None:
        """Record the skip once every replica has reached the occurrence, unless one ran it."""
        moment = slot + timedelta(seconds=overlap.CONFIRM_SKIP_S)
        await asyncio.sleep(max(0.0, (moment - self.clock()).total_seconds()))
        try:
            if not await claim.acquire():
                return  # a replica whose clock is behind took it
        except REDIS_DOWN:
            return
        await self._skip(task, trigger, slot, overlap.OVERRUN)

    async def _skip(self, task: Task, trigger: runs.Trigger, slot: datetime, reason: str) -> None:
        fields = {"task": task.name, "scheduled_for": slot.isoformat(), "trigger": trigger}
        if reason != overlap.OVERRUN:  # that one was counted and logged when found busy
            TASK_SKIPPED.labels(task.name).inc()
            log.warning("occurrence skipped", reason=reason, **fields)
        try:
            await self.runner.skip(task, trigger, slot, reason)
        except Exception:
            log.exception("could not record the skipped occurrence", **fields)
