"""``Slots``, the semaphore per key of ``sluice.app``, against a real Redis and a Redis
Cluster: holders of a key never exceed its limit across instances (as across worker
processes), waiters are served in the order they came, a holder that died frees its
slot when its lease runs out, and a waiter that went away leaves the queue."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import redis.asyncio as aioredis

from sluice.app import Slots
from sluice.app.testing import wait_for
from sluice.streams.engine_keys import Keys

pytestmark = pytest.mark.topologies("single", "cluster")


@pytest.fixture
def store_kind() -> str:
    """What the cluster's config needs of a store: these tests reach none."""
    return "sqlite"


def slots(redis: aioredis.Redis, limit: int, **kw: float) -> Slots:
    return Slots(redis, Keys(prefix="t"), "hosts", limit, **kw)


async def test_holders_of_a_key_never_exceed_its_limit_across_instances(
    redis: aioredis.Redis,
) -> None:
    a, b = slots(redis, 3, poll_s=0.01), slots(redis, 3, poll_s=0.01)
    inside = {"x.example": 0, "y.example": 0}
    most = {"x.example": 0, "y.example": 0}

    async def call(semaphore: Slots, host: str) -> None:
        async with semaphore.hold(host):
            inside[host] += 1
            most[host] = max(most[host], inside[host])
            await asyncio.sleep(0.02)
            inside[host] -= 1

    await asyncio.gather(
        *(call(a if n % 2 else b, host) for n in range(30) for host in ("x.example", "y.example"))
    )
    assert most == {"x.example": 3, "y.example": 3}
    assert await a.holding("x.example") == 0


async def test_waiters_are_served_in_the_order_they_came(redis: aioredis.Redis) -> None:
    a, b = slots(redis, 1), slots(redis, 1)
    assert await a.take("h", "first") == 0
    assert await b.take("h", "w1") == 1
    assert await a.take("h", "w2") == 2
    assert await b.take("h", "w1") == 1, "asking again keeps one's place"
    assert await a.take("h", "w2") == 2
    await a.leave("h", "first")
    assert await a.take("h", "w2") == 1, "w1 comes first though w2 asked since"
    assert await b.take("h", "w1") == 0
    await b.leave("h", "w1")
    assert await a.take("h", "w2") == 0


async def test_a_dead_holders_slot_frees_when_its_lease_runs_out(redis: aioredis.Redis) -> None:
    short = slots(redis, 1, lease_s=0.3)
    assert await short.take("h", "dead") == 0  # and never kept, nor left: its process died
    started = time.monotonic()
    async with short.hold("h", "alive"):
        waited = time.monotonic() - started
        assert await short.holding("h") == 1
    assert 0.1 < waited < 5


async def test_a_kept_lease_does_not_run_out(redis: aioredis.Redis) -> None:
    short = slots(redis, 1, lease_s=0.3)
    async with short.hold("h", "long"):
        await asyncio.sleep(0.8)  # past two leases: kept all along
        assert await short.take("h", "other") == 1
        assert await short.holding("h") == 1
    assert await short.take("h", "other") == 0


async def test_a_waiter_that_went_away_leaves_the_queue(redis: aioredis.Redis) -> None:
    a = slots(redis, 1, poll_s=0.1)  # a waiter stops counting 4 s after its last ask
    assert await a.take("h", "holder") == 0
    assert await a.take("h", "gone") == 1
    waiting = asyncio.create_task(a.hold("h", "cancelled").__aenter__())
    await asyncio.sleep(0.05)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert await a.take("h", "late") == 2, "the cancelled waiter left at once"
    await a.leave("h", "holder")

    async def served() -> bool:  # once "gone" stopped asking, "late" is next
        return await a.take("h", "late") == 0

    await wait_for(served, timeout=10)


async def test_no_limit_asks_nothing_of_redis(redis: aioredis.Redis) -> None:
    unbounded = slots(redis, 0)
    async with unbounded.hold("h"), unbounded.hold("h"):
        assert await unbounded.holding("h") == 0
    assert await redis.keys("t:slots:*") == []
