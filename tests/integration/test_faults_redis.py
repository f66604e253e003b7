"""Redis goes away and comes back; every committed view is counted exactly once
(docs/concepts/index.md).

The relay and the workers run in the test process against the test's own
Redis (``redis_server``), restarted on the same port and data dir, so it
reloads its AOF. A graceful stop flushes the AOF; SIGKILL with
``appendfsync everysec`` may lose up to a second of writes, which the tests
that need that loss make certain by cutting the AOF's tail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
import redis.asyncio as aioredis

from sluice.app.testing import Child, wait_for
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.reminders.events import ReminderCreated
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.relay.publisher import Sent
from sluice.relay.relay import POSITION, Relay
from sluice.store import StoredEvent
from tests.integration.archive_helpers import make_old
from tests.integration.faults_helpers import (
    Trickle,
    aof_file,
    crash_losing_aof_tail,
    pending_of,
    settle,
)
from tests.integration.helpers import post_views, views

pytestmark = [pytest.mark.slow, pytest.mark.topologies("single", "partitioned")]

ARTICLE = "hot"


async def published_up_to(resources: Resources, seq: int) -> None:
    """Until the relay has stored ``seq`` as its position: Redis accepted those events."""

    async def reached() -> bool:
        return await resources.store.position(POSITION) >= seq

    await wait_for(reached)


async def counted_some(resources: Resources) -> None:
    async def some() -> bool:
        return await views(resources, ARTICLE) > 0

    await wait_for(some)


async def test_redis_restart_while_views_flow(
    resources: Resources,
    redis: aioredis.Redis,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    start_relay()
    start_worker()
    trickle = Trickle(resources, ARTICLE)
    await counted_some(resources)

    await asyncio.to_thread(redis_server.stop)
    at_stop = trickle.committed
    await asyncio.to_thread(redis_server.start)
    await trickle.until(at_stop + 300)
    total = await trickle.stop()

    await settle(resources, redis, ARTICLE, total)


async def test_views_committed_while_redis_is_down_are_counted_once_it_is_back(
    resources: Resources,
    redis: aioredis.Redis,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    start_relay()
    start_worker()
    await post_views(resources, ARTICLE, 100)
    await settle(resources, redis, ARTICLE, 100)

    await asyncio.to_thread(redis_server.stop)
    await post_views(resources, ARTICLE, 300, start=100)  # the store does not need Redis
    assert await resources.store.position(POSITION) == 100
    await asyncio.to_thread(redis_server.start)

    await settle(resources, redis, ARTICLE, 400)


async def test_redis_killed_right_after_events_were_published(
    resources: Resources,
    redis: aioredis.Redis,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    start_relay()
    start_worker()
    await post_views(resources, ARTICLE, 300)
    await published_up_to(resources, 300)
    await asyncio.to_thread(redis_server.kill)
    await asyncio.to_thread(redis_server.start)
    await post_views(resources, ARTICLE, 300, start=300)

    await settle(resources, redis, ARTICLE, 600)


async def test_redis_losing_its_last_writes_gets_them_republished(
    resources: Resources,
    redis: aioredis.Redis,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    """After a crash that lost the AOF's tail, the relay rewinds and republishes.

    Before the crash: 200 views counted and durable in Redis (the mark); 200
    views counted whose entries and acks Redis will lose (they must be
    deduplicated when republished); 200 views published while no worker ran
    (they must be republished, or nobody ever counts them).
    """
    stream = resources.keys.stream("articles", resources.keys.partition_of(ARTICLE))
    start_relay()
    worker = spawn("worker", "article-views", "--consumer", "c1")
    await post_views(resources, ARTICLE, 200)
    await settle(resources, redis, ARTICLE, 200)
    mark = aof_file(redis_server).stat().st_size

    await post_views(resources, ARTICLE, 200, start=200)
    await settle(resources, redis, ARTICLE, 400)
    assert worker.terminate() == 0
    await post_views(resources, ARTICLE, 200, start=400)
    await published_up_to(resources, 600)
    assert await redis.xlen(stream) == 600

    await crash_losing_aof_tail(redis_server, mark, redis)
    assert await redis.xlen(stream) == 200, "the AOF tail was not lost: nothing was tested"
    assert await pending_of(redis, stream, "c1") == 0

    spawn("worker", "article-views", "--consumer", "c1")
    await post_views(resources, ARTICLE, 100, start=600)
    state = await settle(resources, redis, ARTICLE, 700)
    assert state.entries >= 700


async def test_redis_restarting_between_the_relays_check_and_its_publish(
    resources: Resources,
    redis: aioredis.Redis,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    """Redis crashes, losing its last writes, and is back before the relay's next XADD.

    The relay compares the Redis ``run_id`` before each batch; this crash
    falls between that check and the publish, so the batch lands on the new
    server. 200 views were published before the crash and lost with the
    AOF's tail; no worker had read them yet. The relay's client has already
    dropped its dead connections, as redis-py does when it sees the closed
    socket at checkout (it does here with Redis 7.0; with 6.2 the first
    command fails instead, which the relay handles, so the drop is explicit).
    """
    stream = resources.keys.stream("articles", resources.keys.partition_of(ARTICLE))
    relay = start_relay()
    await post_views(resources, ARTICLE, 200)
    await published_up_to(resources, 200)
    mark = aof_file(redis_server).stat().st_size
    await post_views(resources, ARTICLE, 200, start=200)
    await published_up_to(resources, 400)
    assert await redis.xlen(stream) == 400

    real_send = relay.send
    after_crash: list[int] = []

    async def crash_then_send(events: Sequence[StoredEvent]) -> Sent:
        if not after_crash:
            await crash_losing_aof_tail(redis_server, mark, redis, resources.redis)
            after_crash.append(await redis.xlen(stream))
        return await real_send(events)

    relay.send = crash_then_send  # type: ignore[method-assign]
    await post_views(resources, ARTICLE, 100, start=400)

    async def crashed() -> bool:
        return bool(after_crash)

    await wait_for(crashed)
    assert after_crash == [200], "the AOF tail was not lost: nothing was tested"

    start_worker()
    state = await settle(resources, redis, ARTICLE, 500)
    assert state.entries >= 500


async def test_a_redis_that_lost_everything_gets_back_only_the_retention_window(
    resources: Resources, redis: aioredis.Redis
) -> None:
    """A stream that vanished is republished from the start of the retention window,
    per aggregate: one whose events are all older than the retention (its stream held
    only what a trim may drop) adds nothing, and does not rewind the relay to the start
    of the history for the others."""
    async with resources.store.transaction() as tx:
        await tx.append(*(ArticleViewed(article_id=ARTICLE, viewer=f"old-{i}") for i in range(20)))
    async with resources.store.transaction() as tx:
        await tx.append(
            ReminderCreated(
                reminder_id="r1",
                owner_id="u1",
                cron="0 0 9 * * *",
                timezone="UTC",
                text="quiet for days",
            )
        )
    await make_old(resources.store, 21)
    await post_views(resources, ARTICLE, 30, start=20)  # seq 22 to 51, young
    config = resources.config
    async with Relay(
        resources.store, resources.redis, resources.keys, retention_s=config.stream_retention
    ) as relay:
        while await relay.run_once():
            pass
        await published_up_to(resources, 51)

        await redis.flushall()  # what a restart without its data leaves
        await relay.reconcile()
        assert await resources.store.position(POSITION) == 21  # the first young view's turn
