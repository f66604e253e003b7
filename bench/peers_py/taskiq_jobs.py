"""taskiq with taskiq-redis's stream broker: a no-op task."""

from __future__ import annotations

import asyncio
import os

from counter import done
from taskiq_redis import RedisStreamBroker

broker = RedisStreamBroker(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379"))


@broker.task
async def noop() -> None:
    done()


async def produce(n: int, chunk: int) -> None:
    await broker.startup()
    for i in range(0, n, chunk):
        await asyncio.gather(*(noop.kiq() for _ in range(min(chunk, n - i))))
    await broker.shutdown()
