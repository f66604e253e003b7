"""Link statistics are exact: after real redirect traffic (GET and HEAD, humans and bots,
repeat visitors, several referrers) and a drain, every number matches what was served;
also with the worker killed by SIGKILL mid-traffic, after a rebuild, and across a Redis
outage."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient
from redis.exceptions import ConnectionError as RedisConnectionError

from sluice.app.assembly import create_app, default_apps
from sluice.app.testing import Child, wait_for
from sluice.builtin.links.http.keys import LINK_FOLLOWER, VISITS
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.http.app_keys import STORE
from sluice.process.resources import Resources
from sluice.projections.replay import rebuild
from sluice.relay.relay import POSITION, Relay
from tests.integration.faults_helpers import pending_of
from tests.integration.link_traffic import Traffic, comparable, today, traffic
from tests.link_helpers import add_link, add_user

pytestmark = pytest.mark.topologies("single", "cluster")

CODE = "promo1"
GROUP = "link-stats"
AiohttpClient = Callable[..., Awaitable[TestClient[Any, Any]]]


async def serve(aiohttp_client: AiohttpClient, config: Config) -> TestClient[Any, Any]:
    client = await aiohttp_client(create_app(config))
    assert client.app is not None
    await add_user(client.app[STORE])  # the owner, with its token
    await add_link(client.app[STORE], CODE, "https://example.org/promo")
    return client


def base_url(client: TestClient[Any, Any]) -> str:
    return str(client.make_url("")).rstrip("/")


async def settled(resources: Resources, redis: aioredis.Redis) -> bool:
    """Everything committed is published, and the group has read and acked all of it."""
    if await resources.store.position(POSITION) < await resources.store.max_seq():
        return False
    try:
        return await _group_caught_up(resources, redis)
    except RedisConnectionError:  # a pooled connection to a restarted Redis: next time
        return False


async def _group_caught_up(resources: Resources, redis: aioredis.Redis) -> bool:
    keys = resources.keys
    # Traffic's visits all go to one code: its partition's stream.
    stream = keys.stream("visits", keys.partition_of(CODE))
    if not await redis.exists(stream):
        return False
    last = (await redis.xinfo_stream(stream))["last-generated-id"]
    for group in await redis.xinfo_groups(stream):
        if group["name"] in (GROUP, GROUP.encode()):
            return int(group["pending"]) == 0 and group["last-delivered-id"] == last
    return False


async def drain_and_check(
    client: TestClient[Any, Any],
    traffic_: Traffic,
    resources: Resources,
    redis: aioredis.Redis,
    *,
    timeout: float = 15,
) -> dict[str, Any]:
    """Wait until the pipeline settled, then assert the exact statistics; returns them."""
    assert client.app is not None
    recorder = client.app[VISITS]

    async def pipeline_settled() -> bool:
        # The visits of the last requests may still be in the writer's buffer.
        return recorder.settled and await settled(resources, redis)

    await wait_for(pipeline_settled, timeout=timeout)
    stats = await traffic_.stats(CODE, f"?from={today()}&to={today()}")
    assert comparable(stats) == traffic_.ledger.expected(CODE)
    assert stats["days"] == [
        {
            "date": today(),
            "visits": traffic_.ledger.total,
            "unique_visitors": len(traffic_.ledger.visitors),
        }
    ]
    return stats


async def test_stats_are_exact_after_mixed_traffic(
    aiohttp_client: AiohttpClient,
    config: Config,
    resources: Resources,
    redis: aioredis.Redis,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    client = await serve(aiohttp_client, config)
    start_relay()
    start_worker(GROUP)
    day = today()
    async with traffic(base_url(client)) as t:
        for _ in range(10):
            assert set(await t.round(CODE)) == {302}
        if today() != day:
            pytest.skip("the traffic crossed midnight UTC")
        stats = await drain_and_check(client, t, resources, redis)
    assert (stats["total"], stats["human"], stats["bots"], stats["unique_visitors"]) == (
        160,
        120,
        40,
        6,
    )
    assert t.ledger.heads == 40  # answered 302, counted nowhere
    referrers = [(r["referrer"], r["visits"]) for r in stats["referrers"]]
    assert referrers == [(None, 60), ("news.example.com", 60), ("www.reddit.com", 40)]
    assert [b["browser"] for b in stats["browsers"]][:2] == ["Chrome", "Firefox"]


async def test_stats_are_exact_when_the_worker_is_killed_mid_traffic_and_after_a_rebuild(
    aiohttp_client: AiohttpClient,
    config: Config,
    resources: Resources,
    redis: aioredis.Redis,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    client = await serve(aiohttp_client, config)
    start_relay()
    day = today()

    def worker() -> Child:
        return spawn("worker", GROUP, "--consumer", "c1", SLUICE_PROJECTION_BATCH="8")

    async def counted() -> int:
        row = await resources.store.fetchone("SELECT total FROM link_stats WHERE code = ?", (CODE,))
        return int(row[0]) if row else 0

    async with traffic(base_url(client)) as t:
        left_pending = kills = 0
        # At least two kills; more (up to six) until one lands while entries are in hand.
        while kills < 2 or (left_pending == 0 and kills < 6):
            kills += 1
            child = worker()
            before = await counted()
            rounds = asyncio.create_task(t.rounds(CODE, 6))

            async def progressed(before: int = before) -> bool:
                return await counted() > before

            await wait_for(progressed, interval=0.005)
            child.kill()  # SIGKILL while the traffic keeps coming
            stream = resources.keys.stream("visits", resources.keys.partition_of(CODE))
            left_pending += await pending_of(redis, stream, "c1", GROUP)
            await rounds
        assert await counted() < t.ledger.total
        assert left_pending > 0, "no kill landed mid-batch: nothing was tested"
        worker()  # the same consumer name: it first drains what c1 held when killed
        for _ in range(2):
            await t.round(CODE)
        if today() != day:
            pytest.skip("the traffic crossed midnight UTC")
        before_rebuild = await drain_and_check(client, t, resources, redis)

        # Damage the live tables, as a bug would, then rebuild from the event history.
        async with resources.store.transaction() as tx:
            await tx.execute("UPDATE link_stats SET total = 1, unique_visitors = 99")
            await tx.execute("DELETE FROM link_stats_referrers")
        result = await rebuild(
            resources, default_apps().projections[GROUP], chunk=50, progress=False
        )
        assert result.events == t.ledger.total
        after_rebuild = await t.stats(CODE, f"?from={day}&to={day}")
        assert {**after_rebuild, "as_of": None} == {**before_rebuild, "as_of": None}

        # Visits after the rebuild are counted once: the watermark and the dedupe agree.
        await t.round(CODE)
        await drain_and_check(client, t, resources, redis)


async def test_redirects_answer_and_visits_count_while_redis_is_down(
    aiohttp_client: AiohttpClient,
    config: Config,
    resources: Resources,
    redis: aioredis.Redis,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    client = await serve(aiohttp_client, config)
    assert client.app is not None
    await add_link(resources.store, "cold01", "https://example.org/cold")
    start_relay()
    start_worker(GROUP)
    day = today()
    async with traffic(base_url(client)) as t:
        await t.round(CODE)
        # Counted before the outage, so the relay runs (and holds its scripts) when it starts.
        await drain_and_check(client, t, resources, redis)
        redis_server.stop()
        # The hot link is cached; the cold one is read from the database: both answer.
        assert set(await t.round(CODE)) == {302}
        assert set(await t.round(CODE)) == {302}
        async with client.session.get(
            client.make_url("/cold01"), allow_redirects=False
        ) as response:
            assert response.status == 302
        assert client.app[VISITS].commits > 0
        redis_server.start()
        await wait_for(_following(client), timeout=10)
        if today() != day:
            pytest.skip("the traffic crossed midnight UTC")
        await drain_and_check(client, t, resources, redis, timeout=20)
    row = await resources.store.fetchone("SELECT total FROM link_stats WHERE code = 'cold01'")
    assert row == (1,)


def _following(client: TestClient[Any, Any]) -> Callable[[], Awaitable[bool]]:
    async def follower_reconnected() -> bool:
        assert client.app is not None
        return client.app[LINK_FOLLOWER].following.is_set()

    return follower_reconnected
