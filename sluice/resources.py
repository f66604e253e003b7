"""One assembly point for workers and commands: store, Redis, keys."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.asyncio as aioredis

from sluice.config import Config
from sluice.store import Store, open_store
from sluice.streams.keys import Keys


@dataclass(frozen=True)
class Resources:
    config: Config
    store: Store
    redis: aioredis.Redis
    keys: Keys


def redis_client(config: Config, *, socket_timeout: float = 5.0) -> aioredis.Redis:
    if not config.redis_url:
        raise RuntimeError("SLUICE_REDIS_URL is not set and no embedded Redis was started")
    return aioredis.Redis.from_url(
        config.redis_url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=2.0,
        health_check_interval=15,
    )


@asynccontextmanager
async def open_resources(config: Config) -> AsyncIterator[Resources]:
    store = await open_store(config)
    redis = redis_client(config)
    try:
        yield Resources(config, store, redis, Keys(config.stream_prefix))
    finally:
        await redis.aclose()
        await store.close()
