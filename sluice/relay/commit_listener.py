"""The relay's wake-up: commits announced by other processes on the outbox channel."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import wait_or_stop
from sluice.redis_client.cluster import refresh_topology
from sluice.streams.engine_keys import Keys

# Its lines name the logger they had before this module was split off.
log = structlog.get_logger("sluice.relay.relay")


async def listen_for_commits(
    redis: aioredis.Redis, keys: Keys, wake: asyncio.Event, stop: asyncio.Event
) -> None:
    """Set ``wake`` on commits announced by other processes; reconnects after outages. It
    never ends before ``stop``: without it the relay still polls, but later."""
    while not stop.is_set():
        try:
            # On a cluster: the channel's node as it is now, not as it was.
            await refresh_topology(redis)
            async with redis.pubsub() as pubsub:
                await pubsub.subscribe(keys.outbox_channel())
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        wake.set()
        except REDIS_DOWN:
            await wait_or_stop(stop, 1.0)
        except Exception:
            log.exception("relay: commit listener failed, subscribing again")
            await wait_or_stop(stop, 1.0)
