"""Entries of the flow-test app's ``throttled`` group waiting for their turn, parked
as a consumer parks them (``sluice.flow.control``), with slots held: what the tests of
the operators' views read (docs/guides/operate.md, "Operate flow control")."""

from __future__ import annotations

import json
import time

from redis.asyncio import Redis

from sluice.flow.limiter import Limiter
from sluice.flow.spec import Flow
from sluice.streams.engine_keys import Keys
from tests.flow_app import throttled

FLOW = Flow(key="tenant", concurrency=4)  # as the flow-test app declares it
assert throttled.run.flow == FLOW


def parked(event_id: str) -> str:
    """An entry as a consumer parks it (``sluice.flow.control``)."""
    fields = ["event_id", event_id, "seq", "7", "type", "WorkQueued", "deliveries", "0"]
    return json.dumps({"id": event_id, "p": 0, "f": fields, "t": int(time.time() * 1000)})


async def acquire(limiter: Limiter, key: str, count: int) -> list[bool]:
    """``count`` entries of ``key`` read by a consumer: which may start."""
    ids = [f"{key}{i}" for i in range(count)]
    return await limiter.acquire([(i, key, True) for i in ids], lambda n: parked(ids[n]))


async def hold_and_park(redis: Redis, keys: Keys) -> Limiter:
    """Tenant a: four in handling (its limit), six waiting; tenant b: four in handling,
    two waiting."""
    limiter = Limiter(redis, keys, "throttled", FLOW, 60_000)
    assert await acquire(limiter, "a", 10) == [True] * 4 + [False] * 6
    assert await acquire(limiter, "b", 6) == [True] * 4 + [False] * 2
    return limiter
