"""Cancelling work that runs on some worker, on whichever host: export jobs, task runs.

A cancel is recorded twice, by the request that asks for it:

- durably, by the work's owner in the database (an export job's row becomes
  ``cancelled`` in the request's transaction): a consumer that picks the work up
  later finds it cancelled and never starts it, a restart forgets nothing, and
  every write of a runner still going is fenced by that status;
- as a signal, a Redis key (``Keys.cancel(kind, id)``, kept ``SIGNAL_TTL_S``)
  that the runner polls every ``POLL_INTERVAL_S`` while it works.

A polled key rather than pub/sub: a message published while a runner's
connection is down (a reconnect, a cluster failover) is lost, a key is still
there at the next poll; one GET is a single-slot command on Redis Cluster,
where pub/sub would take a subscriber connection per process on every node;
and the cost, one GET per running job every half second, is nothing beside the
work itself. The runner also reads the durable record every ``RECORD_EVERY``
polls, and at every poll Redis does not answer, so a cancel whose signal was
never set (Redis down when it was asked) still stops the work, within seconds.

``CancelWatch.run`` runs the work in a task and cancels that task when the
cancel comes, then raises ``sluice.streams.messages.Cancelled``: named in a
group handler's outcomes, the entry is acked, never retried, and its delivery
is recorded ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as aioredis
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait
from sluice.streams.engine_keys import Keys
from sluice.streams.messages import Cancelled

log = structlog.get_logger(__name__)

T = TypeVar("T")

POLL_INTERVAL_S = 0.5
# The durable record is read every RECORD_EVERY polls (2 s): the signal is the fast path.
RECORD_EVERY = 4
# Longer than any run is expected to wait in a queue; the durable record covers the rest.
SIGNAL_TTL_S = 7 * 24 * 3600

# Whether the database says the work is cancelled (the owner's own query).
Recorded = Callable[[], Awaitable[bool]]


async def signal_cancel(redis: aioredis.Redis, keys: Keys, kind: str, target_id: str) -> bool:
    """Tell the runner of ``kind`` ``target_id``, on whichever host, to stop; False when Redis
    does not answer (the runner then learns it from the durable record, more slowly)."""
    try:
        await redis.set(keys.cancel(kind, target_id), b"1", ex=SIGNAL_TTL_S)
    except REDIS_DOWN as exc:
        log.warning(
            "cancel: signal not sent, Redis does not answer",
            kind=kind,
            target_id=target_id,
            error=repr(exc),
        )
        return False
    return True


async def forget_signal(redis: aioredis.Redis, keys: Keys, kind: str, target_id: str) -> None:
    """Remove the signal once the work is stopped (it would expire anyway)."""
    with contextlib.suppress(*REDIS_DOWN):
        await redis.delete(keys.cancel(kind, target_id))


@dataclass(frozen=True)
class CancelWatch:
    """Watches for the cancel of one piece of work while it runs."""

    redis: aioredis.Redis
    keys: Keys
    kind: str
    target_id: str
    recorded: Recorded
    interval_s: float = POLL_INTERVAL_S

    async def requested(self, poll: int) -> bool:
        """Whether a cancel was asked for, at the ``poll``-th poll."""
        try:
            if await self.redis.exists(self.keys.cancel(self.kind, self.target_id)):
                return True
        except REDIS_DOWN as exc:
            log.warning(
                "cancel: signal unreadable, asking the database",
                kind=self.kind,
                target_id=self.target_id,
                error=repr(exc),
            )
            return await self.recorded()
        return poll % RECORD_EVERY == RECORD_EVERY - 1 and await self.recorded()

    async def wait(self) -> None:
        """Return once a cancel was asked for; a failing check is logged and tried again."""
        poll = 0
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                if await self.requested(poll):
                    return
            except Exception as exc:  # the database down too: the work's own writes fail
                log.warning(
                    "cancel: check failed",
                    kind=self.kind,
                    target_id=self.target_id,
                    error=repr(exc),
                )
            poll += 1

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result; raises ``Cancelled`` once the work was stopped by a cancel.

        The work runs in a task of its own, cancelled (and waited for) when the
        cancel comes; whatever it was doing then is unwound like any cancellation
        (an open transaction rolls back).
        """
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(self.wait())
        stopped = False
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when we are cancelled ourselves (a deadline, a shutdown)
            if not task.done():
                stopped = watcher.done()
                if stopped:
                    log.info("cancel: stopping the work", kind=self.kind, target_id=self.target_id)
                with contextlib.suppress(Exception):  # how it ended no longer matters
                    await cancel_and_wait(task)
            await cancel_and_wait(watcher)
        if stopped:
            raise Cancelled(f"{self.kind} {self.target_id} was cancelled")
        return task.result()
