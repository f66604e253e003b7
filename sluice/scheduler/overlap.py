"""What an occurrence does when a run of its task is still in progress (docs/guides/tasks.md).

Called by the replica that claimed the occurrence, once ``Runner.begin`` found
the task's lock busy. By the task's ``SLUICE_<TASK>_OVERLAP``:

- ``skip`` (default): ``Busy`` goes back to the scheduler loop, which gives its
  claim back and records the occurrence ``skipped`` only ``CONFIRM_SKIP_S``
  later, if no replica has taken it by then: a replica whose clock runs ahead
  reaches an occurrence early, and can find the run before it (begun on time
  elsewhere) still holding the lock although by the true clock it ends before
  this occurrence is due; the replicas whose clocks are behind reach it later
  and run it if the lock is free by their clock. Not queued: an occurrence runs
  at its time or not at all.
- ``buffer_one``: the first occurrence to find the lock busy takes the task's
  buffer (a Redis lock, renewed while it waits) and waits for the run lock,
  running right after the current run; while one waits, a further occurrence is
  skipped. Should the buffered replica die, its buffer expires with its TTL.
- ``cancel_other``: the running runs of the task are signalled to stop
  (``sluice.records.cancel``, polled every half second by their runner on
  whichever host), are recorded ``cancelled`` and give their lock back; the new
  occurrence takes it, or is skipped should the lock not come free within the
  lock's TTL and a few seconds (a run whose process froze keeps it that long).
- ``allow_all``: runs take a lock per occurrence (``Runner.lock_key``), so the
  lock is never busy here; each occurrence still runs once, by its claim and
  the run records' unique index.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import structlog

from sluice.aio.lock import RedisLock
from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait
from sluice.records.cancel import signal_cancel
from sluice.scheduler import runs
from sluice.scheduler.runner import CANCEL_KIND, Busy, Run, Runner
from sluice.scheduler.task_spec import Task

log = structlog.get_logger(__name__)

# Twice the clock skew replicas may have (docs/concepts/index.md: under a second) and more: by then
# every replica has reached the occurrence by its own clock.
CONFIRM_SKIP_S = 2.5
POLL_S = 0.05
# How long a cancelled run has to give its lock back, beyond the lock's TTL.
CANCEL_SLACK_S = 3.0

OVERRUN = "overlap: the previous run is still in progress"
BUFFER_TAKEN = "overlap: the previous run is still in progress and another occurrence waits"
NOT_CANCELLED = "overlap: the run in progress did not stop in time after its cancel"


class Skipped(Exception):
    """The occurrence does not run; its message is the reason, stored on its record."""


async def begin(runner: Runner, task: Task, trigger: runs.Trigger, slot: datetime) -> Run:
    """``Runner.begin`` under the task's overlap policy; raises ``Skipped``, and what
    ``Runner.begin`` raises (``Busy`` under ``skip``, ``AlreadyRan``, Redis errors)."""
    policy = task.policy.overlap
    buffer = RedisLock(
        runner.resources.redis, runner.lock_key(task, slot) + ":buffer", runner.ttl_ms
    )
    if policy == "buffer_one" and await runner.resources.redis.exists(buffer.key):
        raise Skipped(BUFFER_TAKEN)  # the lock may be free a moment: the buffered one is next
    try:
        return await runner.begin(task, trigger, slot)
    except Busy:
        pass
    if policy == "buffer_one":
        if not await buffer.acquire():
            raise Skipped(BUFFER_TAKEN)
        return await _buffered(runner, task, trigger, slot, buffer)
    if policy == "cancel_other":
        await _cancel_running(runner, task)
        wait_s = runner.ttl_ms / 1000 + CANCEL_SLACK_S
        return await _wait_for_lock(runner, task, trigger, slot, wait_s, NOT_CANCELLED)
    raise Busy(task.name)  # skip: the loop gives the claim back (see above)


async def _wait_for_lock(
    runner: Runner,
    task: Task,
    trigger: runs.Trigger,
    slot: datetime,
    seconds: float | None,
    reason: str,
) -> Run:
    """Try the lock every ``POLL_S``, for ``seconds`` (None: until it comes free)."""
    loop = asyncio.get_running_loop()
    until = None if seconds is None else loop.time() + seconds
    while until is None or loop.time() < until:
        await asyncio.sleep(POLL_S)
        try:
            return await runner.begin(task, trigger, slot)
        except Busy:
            continue
    raise Skipped(reason)


async def _buffered(
    runner: Runner, task: Task, trigger: runs.Trigger, slot: datetime, buffer: RedisLock
) -> Run:
    """Wait for the lock holding the buffer, renewed every third of its TTL."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(buffer.ttl_ms / 3000)
            with contextlib.suppress(*REDIS_DOWN):
                await buffer.renew()

    renewing = asyncio.create_task(renew())
    log.info(
        "occurrence waits for the run in progress (buffer_one)",
        task=task.name,
        scheduled_for=slot.isoformat(),
    )
    try:
        return await _wait_for_lock(runner, task, trigger, slot, None, OVERRUN)
    finally:
        await cancel_and_wait(renewing)
        with contextlib.suppress(*REDIS_DOWN):
            await buffer.release()


async def _cancel_running(runner: Runner, task: Task) -> None:
    resources = runner.resources
    for record in await runs.running(resources.store, task.name):
        log.warning(
            "cancelling the run in progress for a newer occurrence (cancel_other)",
            task=task.name,
            run_id=record.id,
        )
        await signal_cancel(resources.redis, resources.keys, CANCEL_KIND, record.id)
