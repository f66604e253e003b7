"""The history sampler: a task of every worker process that writes what its consumers
did to the group history (``buckets``), and the groups' lag.

Every ``SAMPLE_SECONDS`` it takes the outcomes its own consumers counted since its last
sample (``Consumer.counters``: the same counts as the ``sluice_handled_entries``,
``sluice_retries`` and ``sluice_dead_lettered`` metrics, but per consumer, so two
workers in one process are not counted twice) and adds them to the current minute; it
samples the lag of each of its groups (``XINFO GROUPS`` once per stream) too. Once
more when the worker stops, after its consumers have finished.

Redis down: the sample is kept and added to the next one; what is kept is written to
the minute it was taken in, so nothing is lost or moved, only late (up to 24 hours:
older minutes have expired anyway). Nothing here stops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import redis.asyncio as aioredis
import structlog
from redis.exceptions import ResponseError

from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import wait_or_stop
from sluice.events import utcnow
from sluice.records.group_history.buckets import RETENTION, Counts, Writer, minute_of
from sluice.streams.engine_keys import Keys
from sluice.streams.spec import Counters

log = structlog.get_logger(__name__)

# How often, in seconds, a worker writes its groups' outcomes and lag to the history.
SAMPLE_SECONDS = 5.0
# The last sample, when the worker stops, waits no longer for Redis.
LAST_SAMPLE_SECONDS = 3.0


class Counted(Protocol):
    """What the sampler reads of a consumer (``sluice.consumers.consumer.Consumer``)."""

    @property
    def group(self) -> str: ...

    @property
    def counters(self) -> Counters: ...

    @property
    def streams(self) -> list[str]: ...


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def group_lags(
    redis: aioredis.Redis, streams_of: Mapping[str, Sequence[str]]
) -> dict[str, int | None]:
    """Each group's lag summed over its streams: one ``XINFO GROUPS`` per stream, in one
    pipeline (per primary, on a cluster). None when Redis cannot tell for one of them
    (Redis 6.2 has no lag; 7 has none after entries were deleted below the group)."""
    streams = sorted({stream for names in streams_of.values() for stream in names})
    pipe = redis.pipeline(transaction=False)
    for stream in streams:
        pipe.xinfo_groups(stream)
    answers: list[Any] = await pipe.execute(raise_on_error=False)
    lags: dict[tuple[str, str], int | None] = {}
    for stream, answer in zip(streams, answers, strict=True):
        if isinstance(answer, ResponseError):
            continue  # no such stream yet: nothing waits in it
        if isinstance(answer, BaseException):
            raise answer
        for info in answer:
            lag = info.get("lag")
            lags[stream, _text(info["name"])] = None if lag is None else int(lag)
    totals: dict[str, int | None] = {}
    for group, names in streams_of.items():
        total: int | None = 0
        for stream in names:
            # A group not there yet: its consumer is about to make it.
            lag = lags.get((stream, group), 0)
            total = None if total is None or lag is None else total + lag
        totals[group] = total
    return totals


class HistorySampler:
    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        consumers: Sequence[Counted],
        *,
        interval: float = SAMPLE_SECONDS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.redis = redis
        self.interval = interval
        self.clock = clock
        self.writer = Writer(redis, keys)
        self.consumers = list(consumers)
        self.streams: dict[str, list[str]] = {}
        for consumer in self.consumers:
            self.streams.setdefault(consumer.group, []).extend(consumer.streams)
        self._seen = {group: Counts() for group in self.streams}
        # Taken and not yet written: group -> minute -> deltas.
        self.unwritten: dict[str, dict[datetime, Counts]] = {}
        self._down = False

    async def run(self, done: asyncio.Event) -> None:
        """Sample every ``interval`` until ``done`` is set, then once more."""
        while not done.is_set():
            await self.sample()
            await wait_or_stop(done, self.interval)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LAST_SAMPLE_SECONDS):
                await self.sample()
        if self.unwritten:
            log.warning("history: counts not written at stop", groups=sorted(self.unwritten))

    async def sample(self) -> None:
        """Take the consumers' counts and write them with the lag; on failure, keep them."""
        minute = minute_of(self.clock())
        self._take(minute)
        try:
            await self._write(minute)
        except REDIS_DOWN as exc:
            if not self._down:
                log.warning("history: Redis unavailable, keeping counts", error=repr(exc))
                self._down = True
            return
        except Exception:  # the history is not worth a worker: logged, tried again
            log.exception("history: sample failed, keeping counts")
            return
        if self._down:
            log.info("history: Redis available again, counts written")
            self._down = False

    def _take(self, minute: datetime) -> None:
        totals = {group: Counts() for group in self.streams}
        for consumer in self.consumers:
            c = consumer.counters
            totals[consumer.group] += Counts(c.handled, c.retried, c.dead)
        for group, total in totals.items():
            delta, self._seen[group] = total - self._seen[group], total
            if delta:
                minutes = self.unwritten.setdefault(group, {})
                minutes[minute] = minutes.get(minute, Counts()) + delta
        for group, minutes in list(self.unwritten.items()):
            for old in [m for m in minutes if m <= minute - RETENTION]:
                del minutes[old]  # expired in Redis by now
            if not minutes:
                del self.unwritten[group]

    async def _write(self, minute: datetime) -> None:
        lags = await group_lags(self.redis, self.streams)
        for group in self.streams:
            lag = lags[group]
            counts = self.unwritten.get(group, {})
            await self.writer.write(group, counts, None if lag is None else (minute, lag))
            self.unwritten.pop(group, None)
