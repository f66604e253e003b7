"""Dramatiq with its Redis broker: a no-op actor."""

from __future__ import annotations

import os

import dramatiq
from counter import done
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")))


@dramatiq.actor
def noop() -> None:
    done()


async def produce(n: int, chunk: int) -> None:
    # Dramatiq's client is synchronous: one enqueue (a Redis script call) per message.
    for _ in range(n):
        noop.send()
