"""``CancelWatch`` (sluice.records.cancel): work stopped by the Redis signal, by the
database's record when Redis does not answer, and left alone when nobody cancels it."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from sluice.records.cancel import CancelWatch
from sluice.streams.engine_keys import Keys
from sluice.streams.messages import Cancelled

KEYS = Keys()
INTERVAL = 0.02


class FakeRedis:
    """The one command the watch sends; ``down`` makes it fail as an outage does."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.down = False

    async def exists(self, key: str) -> int:
        if self.down:
            raise redis.exceptions.ConnectionError("Redis is down")
        return int(key in self.keys)


class Recorded:
    def __init__(self) -> None:
        self.cancelled = False
        self.asked = 0

    async def __call__(self) -> bool:
        self.asked += 1
        return self.cancelled


def watch(fake: FakeRedis, recorded: Recorded) -> CancelWatch:
    return CancelWatch(cast(aioredis.Redis, fake), KEYS, "export", "job-1", recorded, INTERVAL)


class Work:
    """Work that runs until cancelled, and says whether it was unwound."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.unwound = False

    async def __call__(self) -> str:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            self.unwound = True
        return "never"


async def test_the_signal_stops_the_work_and_raises_cancelled() -> None:
    fake, recorded, work = FakeRedis(), Recorded(), Work()
    running = asyncio.create_task(watch(fake, recorded).run(work()))
    await work.started.wait()
    fake.keys.add(KEYS.cancel("export", "job-1"))
    started = time.monotonic()
    with pytest.raises(Cancelled):
        await running
    assert time.monotonic() - started < 10 * INTERVAL
    assert work.unwound


async def test_with_redis_down_the_database_record_stops_the_work() -> None:
    fake, recorded, work = FakeRedis(), Recorded(), Work()
    fake.down = True
    running = asyncio.create_task(watch(fake, recorded).run(work()))
    await work.started.wait()
    recorded.cancelled = True
    with pytest.raises(Cancelled):
        await running
    assert work.unwound


async def test_the_record_is_read_now_and_then_even_without_a_signal() -> None:
    fake, recorded, work = FakeRedis(), Recorded(), Work()
    recorded.cancelled = True  # the signal was never set (Redis was down when asked)
    with pytest.raises(Cancelled):
        await watch(fake, recorded).run(work())
    assert recorded.asked == 1 and work.unwound


async def test_work_nobody_cancels_returns_its_result_or_raises_its_error() -> None:
    fake, recorded = FakeRedis(), Recorded()

    async def quick() -> str:
        await asyncio.sleep(3 * INTERVAL)
        return "done"

    async def failing() -> Any:
        raise ValueError("boom")

    assert await watch(fake, recorded).run(quick()) == "done"
    with pytest.raises(ValueError, match="boom"):
        await watch(fake, recorded).run(failing())


async def test_cancelling_the_caller_cancels_the_work_too() -> None:
    fake, recorded, work = FakeRedis(), Recorded(), Work()
    running = asyncio.create_task(watch(fake, recorded).run(work()))
    await work.started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert work.unwound
