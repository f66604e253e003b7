"""Flow control across real worker processes (``sluice worker``): one tenant's backlog
does not hold up another tenant's entry, a tenant's limit holds across workers while
one is killed and another reclaims its entries, and a rate holds across workers
(docs/guides/write-an-app.md, "Flow control").

The relay runs in the test process; the group is the ``throttled`` group of the
flow-control test app (tests/flow_app), its limits set as a deployment sets them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from sluice.app.testing import Child, wait_for
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.flow_app import APPS, ATTEMPTS, HANDLED, STARTS, WorkQueued, most_at_once

pytestmark = [
    pytest.mark.slow,
    pytest.mark.apps(APPS),
    pytest.mark.topologies("single", "cluster"),
]


async def queue(
    resources: Resources, tenant: str, n: int, ms: int, *, start: int = 0
) -> list[WorkQueued]:
    """Commit ``n`` entries of ``tenant``, a thousand per transaction."""
    made = [WorkQueued(tenant=tenant, item=f"{tenant}-{i}", ms=ms) for i in range(start, n + start)]
    for at in range(0, n, 1000):
        async with resources.store.transaction() as tx:
            await tx.append(*made[at : at + 1000])
    return made


async def most(redis: Redis, tenant: str) -> int:
    return int(await redis.get(most_at_once(tenant)) or 0)


async def test_one_tenants_backlog_does_not_hold_up_anothers_entry(
    resources: Resources, start_relay: Callable[..., Relay], spawn: Callable[..., Child]
) -> None:
    redis = resources.redis
    start_relay()
    spawn("worker", "throttled", "--consumer", "w1")
    [first] = await queue(resources, "a", 1, ms=100)

    async def working() -> bool:  # the worker is up: a's first entry started
        return await redis.hexists(STARTS, first.event_id)

    await wait_for(working, timeout=60)
    # b's entry comes right behind a's ten thousand in the stream.
    await queue(resources, "a", 10_000, ms=100, start=1)
    [b] = [WorkQueued(tenant="b", item="b-0", ms=100)]
    async with resources.store.transaction() as tx:
        await tx.append(b)
    queued = time.time()

    async def started() -> bool:
        return await redis.hexists(STARTS, b.event_id)

    await wait_for(started, timeout=60)
    waited = float(await redis.hget(STARTS, b.event_id) or "inf") - queued
    assert waited < 2.0, f"b's entry waited {waited:.2f} s behind a's backlog"
    assert await most(redis, "a") <= 4


async def test_a_tenants_limit_holds_across_workers_while_one_is_killed(
    resources: Resources, start_relay: Callable[..., Relay], spawn: Callable[..., Child]
) -> None:
    redis, total = resources.redis, 300
    env = {"SLUICE_THROTTLED_KEY_CONCURRENCY": "3", "SLUICE_CLAIM_IDLE_MS": "3000"}
    start_relay()
    workers = [spawn("worker", "throttled", "--consumer", f"w{n}", **env) for n in (1, 2, 3)]
    made = await queue(resources, "a", total, ms=100)

    async def handled(at_least: int) -> bool:
        return await redis.scard(HANDLED) >= at_least

    await wait_for(lambda: handled(30), timeout=60)
    workers[0].kill()  # mid-work: it holds up to three of a's slots
    await wait_for(lambda: handled(total), timeout=180)
    assert await redis.smembers(HANDLED) == {e.event_id.encode() for e in made}
    assert await most(redis, "a") == 3


@pytest.mark.stores("sqlite")  # the limiter is Redis's: once per topology is enough
async def test_a_rate_holds_across_workers(
    resources: Resources, start_relay: Callable[..., Relay], spawn: Callable[..., Child]
) -> None:
    redis, rate, window = resources.redis, 50, 20.0
    env = {"SLUICE_THROTTLED_KEY_CONCURRENCY": "0", "SLUICE_THROTTLED_KEY_RATE": f"{rate}/s"}
    start_relay()
    await queue(resources, "a", 1_400, ms=0)
    for n in (1, 2, 3):
        spawn("worker", "throttled", "--consumer", f"w{n}", **env)

    async def first() -> bool:
        return await redis.hlen(STARTS) > 0

    await wait_for(first, timeout=60)
    begun = min(float(t) for t in (await redis.hgetall(STARTS)).values())
    # Past the start's burst, a window the backlog outlasts.
    since, until = begun + 2.0, begun + 2.0 + window

    async def window_over() -> bool:
        return time.time() > until + 1.0

    await wait_for(window_over, timeout=window + 60, interval=0.5)
    starts = [float(t) for t in (await redis.hgetall(STARTS)).values()]
    assert len(starts) < 1_400, "the backlog ran out within the window"
    counted = sum(1 for t in starts if since <= t < until)
    assert abs(counted / window - rate) <= rate * 0.05, counted / window
    # Waiting for the rate is no attempt: every entry was handled at its first.
    assert set((await redis.hgetall(ATTEMPTS)).values()) == {b"1"}
