"""A worker process killed with SIGKILL in the middle of its work loses nothing and
applies nothing twice (docs/concepts/index.md); SIGTERM stops it cleanly.

The worker is a real ``python -m sluice worker`` child; the relay runs in the
test process. The views are committed and published first, so the worker
starts with a backlog of 60 batches and is killed while it works through them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from sluice.app.testing import Child, wait_for
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION, Relay
from tests.integration.faults_helpers import (
    pending_of,
    settle,
)
from tests.integration.helpers import post_views, views

pytestmark = pytest.mark.slow

ARTICLE = "hot"
TOTAL = 3000
BATCH = "50"
NEVER_MS = "600000"  # a claim idle time no test outlives: only the own-pending path recovers


async def backlog(resources: Resources, start_relay: Callable[..., Relay]) -> None:
    """Commit TOTAL views and wait until the relay published all of them."""
    start_relay()
    await post_views(resources, ARTICLE, TOTAL)

    async def published() -> bool:
        return await resources.store.position(POSITION) == TOTAL

    await wait_for(published)


async def wait_counting(resources: Resources) -> None:
    """Until the worker has applied its first batch; polled fast, it works quickly."""

    async def counting() -> bool:
        return await views(resources, ARTICLE) > 0

    await wait_for(counting, interval=0.005)


async def kill_mid_work(
    resources: Resources, redis: aioredis.Redis, spawn: Callable[..., Child], **env: str
) -> None:
    """Start worker c1 and SIGKILL it mid-backlog, until a kill leaves entries pending.

    The kill nearly always lands between a batch's XREADGROUP and its XACK;
    when it falls in the short gap after an XACK, nothing is pending and a
    new c1 is started and killed again.
    """
    stream = resources.keys.stream("articles")
    for _ in range(5):
        before = await views(resources, ARTICLE)
        worker = spawn(
            "worker", "article-views", "--consumer", "c1", SLUICE_PROJECTION_BATCH=BATCH, **env
        )

        async def progressed(before: int = before) -> bool:
            return await views(resources, ARTICLE) > before

        await wait_for(progressed, interval=0.005)
        worker.kill()
        assert await views(resources, ARTICLE) < TOTAL, "the worker finished before the kill"
        if await pending_of(redis, stream, "c1") > 0:
            return
    raise AssertionError("no kill left entries pending: nothing was tested")


async def test_worker_killed_mid_batch_restarts_and_drains_its_own_pending_list(
    resources: Resources,
    redis: aioredis.Redis,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    await backlog(resources, start_relay)
    await kill_mid_work(resources, redis, spawn, SLUICE_CLAIM_IDLE_MS=NEVER_MS)

    # Same consumer name, and no XAUTOCLAIM within the test's lifetime: the
    # entries the dead process held come back only through its pending list.
    spawn(
        "worker",
        "article-views",
        "--consumer",
        "c1",
        SLUICE_PROJECTION_BATCH=BATCH,
        SLUICE_CLAIM_IDLE_MS=NEVER_MS,
    )
    await settle(resources, redis, ARTICLE, TOTAL)
    assert await pending_of(redis, resources.keys.stream("articles"), "c1") == 0


async def test_entries_of_a_killed_worker_are_reclaimed_by_another_consumer(
    resources: Resources,
    redis: aioredis.Redis,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    await backlog(resources, start_relay)
    await kill_mid_work(resources, redis, spawn)

    # c1 never comes back: only c2's XAUTOCLAIM can empty c1's pending list.
    spawn(
        "worker",
        "article-views",
        "--consumer",
        "c2",
        SLUICE_PROJECTION_BATCH=BATCH,
        SLUICE_CLAIM_IDLE_MS="1000",
    )

    async def dead_consumer_has_nothing_pending() -> bool:
        return await pending_of(redis, resources.keys.stream("articles"), "c1") == 0

    await wait_for(dead_consumer_has_nothing_pending)
    await settle(resources, redis, ARTICLE, TOTAL)


async def test_sigterm_finishes_the_batch_in_hand_and_exits_cleanly(
    resources: Resources,
    redis: aioredis.Redis,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    await backlog(resources, start_relay)
    stream = resources.keys.stream("articles")
    worker = spawn("worker", "article-views", "--consumer", "c1", SLUICE_PROJECTION_BATCH=BATCH)
    await wait_counting(resources)

    assert worker.terminate() == 0
    counted = await views(resources, ARTICLE)
    assert counted < TOTAL, "the worker finished before SIGTERM: nothing was tested"
    assert await pending_of(redis, stream, "c1") == 0
    # Everything the group read was applied and acked, nothing else: the
    # count equals the entries delivered to the group.
    [group] = await redis.xinfo_groups(stream)
    delivered: Any = await redis.xrange(stream, max=group["last-delivered-id"])
    assert counted == len(delivered)

    spawn("worker", "article-views", "--consumer", "c1", SLUICE_PROJECTION_BATCH=BATCH)
    await settle(resources, redis, ARTICLE, TOTAL)
