"""The Redis clients of the API and the scheduler on a real Redis Cluster (3 primaries,
3 replicas, started once for this module): the client ``redis_client`` builds from
``SLUICE_REDIS_CLUSTER_NODES``, the link cache's follower and change hints, reminder
claims, the login limit, and a primary killed under the follower and the listener."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as ClusterClient

from sluice.aio.waiting import cancel_and_wait
from sluice.app.assembly import open_resources
from sluice.app.testing import wait_for
from sluice.builtin.links.cache import LinkCache, Target
from sluice.builtin.links.cache_updates import ChangeHints, ChangeListener, LinkFollower
from sluice.builtin.links.events import LinkUpdated
from sluice.builtin.links.keys import LinksKeys
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.cron_runner import ReminderRunner
from sluice.builtin.reminders.events import ReminderCreated
from sluice.config import Config
from sluice.embedded.redis_cluster_server import RedisCluster
from sluice.embedded.redis_server import RedisServer
from sluice.errors import TooManyRequests
from sluice.events import Event, encode, type_name
from sluice.http import login_limit
from sluice.http.login_limit import MAX_FAILURES, LoginLimiter
from sluice.process.resources import keys_for, redis_client
from sluice.redis_client.cluster import is_cluster
from sluice.streams.engine_keys import Keys
from tests.link_helpers import OWNER, add_user

pytestmark = pytest.mark.stores("sqlite")  # about Redis; the store is incidental

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    server = RedisCluster(tmp_path_factory.mktemp("cluster"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster_config(make_config: Callable[..., Config], cluster: RedisCluster) -> Config:
    """A config of the cluster (after a previous test's kill, with its replica promoted)."""
    cluster.wait_ready()
    cluster.flush()
    return make_config(
        redis_cluster_nodes=cluster.seeds,
        redis_password=cluster.password,
        stream_partitions=PARTITIONS,
    )


@pytest.fixture
async def client(cluster_config: Config) -> AsyncIterator[aioredis.Redis]:
    redis = redis_client(cluster_config)
    try:
        yield redis
    finally:
        await redis.aclose()


def cluster_of(redis: aioredis.Redis) -> ClusterClient:
    assert isinstance(redis, ClusterClient)
    return redis


async def owner(redis: aioredis.Redis, key: str) -> str:
    """The address of the primary that holds ``key``."""
    client = await cluster_of(redis).initialize()
    node = client.get_node_from_key(key)
    assert node is not None
    return str(node.name)


def code_in(keys: Keys, partition: int) -> str:
    """An aggregate id (a link code, a reminder id) whose events go to ``partition``."""
    ids = (f"id{i:04}" for i in itertools.count())
    return next(i for i in ids if keys.partition_of(i) == partition)


async def append(redis: aioredis.Redis, keys: Keys, event: Event, aggregate_id: str) -> None:
    """XADD ``event`` to its partition's stream, as the relay does."""
    stream = keys.stream(event.aggregate, keys.partition_of(aggregate_id))
    await redis.xadd(stream, {"type": type_name(event), "data": encode(event)})


class Links:
    """The database of links, as the cache's loader sees it."""

    def __init__(self) -> None:
        self.urls: dict[str, str] = {}

    async def load(self, code: str) -> Target | None:
        url = self.urls.get(code)
        return None if url is None else Target(url, None, False)

    def cache(self) -> LinkCache:
        return LinkCache(self.load)


async def answers(cache: LinkCache, codes: list[str]) -> list[str | None]:
    targets = [await cache.get(code) for code in codes]
    return [None if t is None else t.url for t in targets]


def updated(code: str, url: str) -> LinkUpdated:
    return LinkUpdated(code=code, owner_id="owner", url=url)


@contextlib.asynccontextmanager
async def running(*coroutines: Any) -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks = [asyncio.create_task(c) for c in coroutines]
    try:
        yield tasks
    finally:
        for task in tasks:
            await cancel_and_wait(task)


async def test_the_client_from_the_seed_nodes_reaches_every_primary(
    cluster_config: Config, client: aioredis.Redis
) -> None:
    assert is_cluster(client)
    keys = keys_for(cluster_config)
    streams = [keys.stream("links", p) for p in keys.numbers]
    # The partitions spread over the primaries, and every one takes writes and reads.
    assert len({await owner(client, s) for s in streams}) == 3
    for p, stream in enumerate(streams):
        await client.xadd(stream, {"n": str(p)})
    assert [await client.xlen(s) for s in streams] == [1] * PARTITIONS
    assert await client.ping()
    # The API's client (no retry) as well.
    api = redis_client(cluster_config, retry=False)
    try:
        assert [await api.xlen(s) for s in streams] == [1] * PARTITIONS
    finally:
        await api.aclose()


async def test_the_link_follower_forgets_changes_on_every_partition(
    cluster_config: Config, client: aioredis.Redis
) -> None:
    keys = keys_for(cluster_config)
    links = Links()
    cache = links.cache()
    codes = [code_in(keys, p) for p in keys.numbers]
    links.urls = {code: f"https://example.org/{code}/1" for code in codes}
    streams = [keys.stream("links", p) for p in keys.numbers]
    follower = LinkFollower(client, streams, cache, block_ms=500)
    async with running(follower.run()) as [task]:
        await asyncio.wait_for(follower.following.wait(), 10)
        assert follower.connections == PARTITIONS  # a reader per partition
        assert await answers(cache, codes) == list(links.urls.values())  # cached now
        links.urls = {code: f"https://example.org/{code}/2" for code in codes}
        assert await answers(cache, codes) != list(links.urls.values())  # still cached
        for code in codes:
            await append(client, keys, updated(code, links.urls[code]), code)

        async def all_forgotten() -> bool:
            return await answers(cache, codes) == list(links.urls.values())

        await wait_for(all_forgotten, timeout=5)
        assert not task.done()


async def test_reminder_runners_claim_many_occurrences_across_slots_and_follow_every_partition(
    cluster_config: Config, client: aioredis.Redis
) -> None:
    count = 150  # each occurrence's claim key in a slot of its own, mostly
    created = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
    now = created + timedelta(seconds=40)  # the 12:01:00 occurrences are 10 s late
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(open_resources(cluster_config))
        await add_user(first.store)
        async with first.store.transaction() as tx:
            for i in range(count):
                await stored.insert_reminder(
                    tx,
                    stored.Reminder(
                        id=f"reminder-{i:03}",
                        owner_id=OWNER,
                        cron="0 * * * * *",
                        timezone="UTC",
                        text="hello",
                        created_at=created,
                    ),
                )
        runners = []
        for i in range(2):
            resources = (
                first if i == 0 else await stack.enter_async_context(open_resources(cluster_config))
            )
            runners.append(ReminderRunner(resources, holder=f"runner-{i}", clock=lambda: now))
        stop = asyncio.Event()
        async with running(*(r.run(stop) for r in runners)) as tasks:

            async def all_fired() -> bool:
                return sum(r.counters.fired for r in runners) == count

            await wait_for(all_fired, timeout=15)
            # Each occurrence claimed once in Redis: the other runner saw it taken, and
            # the database never had to turn one away.
            assert sum(r.counters.claimed_elsewhere for r in runners) == count
            assert sum(r.counters.already_fired for r in runners) == 0

            # Reminders created on every partition's stream are followed.
            keys = first.keys
            new = [code_in(keys, p) for p in keys.numbers]  # a reminder id on each
            for reminder_id in new:
                event = ReminderCreated(
                    reminder_id=reminder_id,
                    owner_id=OWNER,
                    cron="0 0 * * * *",
                    timezone="UTC",
                    text="new",
                    occurred_at=now,  # due in an hour
                )
                await append(client, keys, event, reminder_id)

            async def followed() -> bool:
                return all(r.scheduled == count + len(new) for r in runners)

            await wait_for(followed, timeout=10)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 10)


async def test_the_login_limit_counts_across_replicas(
    cluster_config: Config, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first command of a fresh cluster client reads the slot map and loads the
    # script: on a loaded machine that can take longer than the limiter's 0.5 s budget,
    # and the limiter then counts in its process only, as it does when Redis is down (the
    # likely cause of this test's one failure in a full-suite run). That fallback has its
    # own tests (tests/api/test_login_limit.py, without Redis); here Redis answers.
    monkeypatch.setattr(login_limit, "REDIS_TIMEOUT", 10.0)
    keys = keys_for(cluster_config)
    apis = [redis_client(cluster_config, retry=False) for _ in range(2)]
    try:
        replicas = [LoginLimiter(api, keys) for api in apis]
        email = "ada@example.org"
        for i in range(MAX_FAILURES):
            limiter = replicas[i % 2]
            await limiter.failed(email, await limiter.attempt(email))
        for limiter in replicas:
            with pytest.raises(TooManyRequests) as refused:
                await limiter.attempt(email)
            assert "too many failed logins" in str(refused.value)
        # Another email is not limited, and a success clears the email's failures.
        other = "bob@example.org"
        await replicas[0].attempt(other)
        await replicas[1].succeeded(other)
        await replicas[1].attempt(other)
    finally:
        for api in apis:
            await api.aclose()


async def test_change_hints_reach_another_replica(
    cluster_config: Config, client: aioredis.Redis
) -> None:
    keys = keys_for(cluster_config)
    channel = LinksKeys(keys.prefix).links_changed_channel()
    links = Links()
    cache = links.cache()
    codes = [f"hint{i}" for i in range(5)]
    links.urls = {code: f"https://example.org/{code}/1" for code in codes}
    hints = ChangeHints(client, channel, origin="sender")
    listener = ChangeListener(client, channel, cache, origin="receiver")
    async with running(listener.run()):
        await asyncio.wait_for(listener.listening.wait(), 10)
        assert await answers(cache, codes) == list(links.urls.values())
        links.urls = {code: f"https://example.org/{code}/2" for code in codes}
        for code in codes:  # coalesced into one message
            hints.publish(code)

        async def all_forgotten() -> bool:
            return await answers(cache, codes) == list(links.urls.values())

        await wait_for(all_forgotten, timeout=5)
    await hints.close()


def _node(cluster: RedisCluster, address: str) -> RedisServer:
    port = int(address.rpartition(":")[2])
    return next(node for node in cluster.nodes if node.port == port)


async def test_a_killed_primary_is_waited_out_by_the_follower_and_the_listener(
    cluster: RedisCluster, make_config: Callable[..., Config], cluster_config: Config
) -> None:
    # A prefix whose hints channel lives on a primary that also holds a links partition,
    # so that one kill takes both the listener's subscription and a follower's reader.
    probe = redis_client(cluster_config)
    try:
        for prefix in (f"kill{i}" for i in itertools.count()):
            keys = Keys(prefix, PARTITIONS, tagged=True)
            victim = await owner(probe, LinksKeys(keys.prefix).links_changed_channel())
            on_victim = [
                p for p in keys.numbers if await owner(probe, keys.stream("links", p)) == victim
            ]
            if on_victim:
                break
    finally:
        await probe.aclose()
    config = make_config(
        redis_cluster_nodes=cluster.seeds,
        redis_password=cluster.password,
        stream_partitions=PARTITIONS,
        stream_prefix=prefix,
    )
    links = Links()
    cache = links.cache()
    # Codes on the victim's partition, and one elsewhere.
    elsewhere = next(p for p in keys.numbers if p not in on_victim)
    codes = [code_in(keys, on_victim[0]), code_in(keys, elsewhere)]
    links.urls = {code: f"https://example.org/{code}/1" for code in codes}
    # Clients without retries, as the API's; the listener on one of its own (the API shares
    # the follower's, whose failed reads make it read the slot map again); a writer
    # standing in for the relay.
    reader = redis_client(config, socket_timeout=5.5, retry=False)
    subscriber = redis_client(config, socket_timeout=5.5, retry=False)
    api = redis_client(config, retry=False)
    writer = redis_client(config)
    streams = [keys.stream("links", p) for p in keys.numbers]
    follower = LinkFollower(reader, streams, cache, block_ms=500)
    listener = ChangeListener(
        subscriber, LinksKeys(keys.prefix).links_changed_channel(), cache, origin="receiver"
    )
    hints = ChangeHints(api, LinksKeys(keys.prefix).links_changed_channel(), origin="sender")
    try:
        async with running(follower.run(), listener.run()) as tasks:
            await asyncio.wait_for(follower.following.wait(), 10)
            await asyncio.wait_for(listener.listening.wait(), 10)
            connections, subscriptions = follower.connections, listener.subscriptions

            _node(cluster, victim).kill()
            await asyncio.to_thread(cluster.wait_ready)  # its replica took over

            async def back() -> bool:
                return (
                    follower.following.is_set()
                    and follower.connections > connections
                    and listener.listening.is_set()
                    and listener.subscriptions > subscriptions
                )

            await wait_for(back, timeout=20)
            assert not any(task.done() for task in tasks)

            # The stream path: a change on the failed-over partition and on another one.
            assert await answers(cache, codes) == list(links.urls.values())  # cached again
            links.urls = {code: f"https://example.org/{code}/2" for code in codes}
            for code in codes:
                await append(writer, keys, updated(code, links.urls[code]), code)

            async def forgotten() -> bool:
                return await answers(cache, codes) == list(links.urls.values())

            await wait_for(forgotten, timeout=5)

            # The hint path: the listener subscribed again, on the new primary.
            links.urls = {code: f"https://example.org/{code}/3" for code in codes}
            assert await answers(cache, codes) != list(links.urls.values())
            for code in codes:
                hints.publish(code)
            await wait_for(forgotten, timeout=5)
            assert not any(task.done() for task in tasks)
    finally:
        await hints.close()
        for client in (reader, subscriber, api, writer):
            await client.aclose()
