"""The history sampler against Redis: samples land in their minute on every topology,
lag is the group's undelivered entries, the hashes expire, and a sample taken while
Redis is down is written, once, when it is back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
import redis.asyncio as aioredis

from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow
from sluice.process.resources import Resources, redis_client
from sluice.records.group_history.buckets import expire_at, hour_label, minute_of
from sluice.records.group_history.reading import Point, read_history
from sluice.records.group_history.sampler import HistorySampler
from sluice.streams.spec import Counters

# The history is Redis alone: one store is enough.
pytestmark = pytest.mark.stores("sqlite")


@dataclass
class FakeConsumer:
    group: str
    counters: Counters = field(default_factory=Counters)
    streams: list[str] = field(default_factory=list)


class Clock:
    def __init__(self) -> None:
        self.now = minute_of(utcnow())

    def __call__(self) -> datetime:
        return self.now


async def points(resources: Resources, group: str, clock: Clock, minutes: int) -> list[Point]:
    history = await read_history(resources.redis, resources.keys, [group], minutes, clock())
    [found] = history.groups
    return found.points


@pytest.mark.topologies("single", "partitioned", "cluster")
async def test_samples_land_in_their_minute_with_the_lag_of_every_partition(
    resources: Resources,
) -> None:
    keys, redis = resources.keys, resources.redis
    consumers = [
        FakeConsumer("mail", streams=[keys.stream("users", p), keys.retry("mail", p)])
        for p in keys.numbers
    ]
    for consumer in consumers:
        for stream in consumer.streams:
            await redis.xgroup_create(stream, "mail", id="0", mkstream=True)
    for p in keys.numbers:
        for n in range(2):
            await redis.xadd(keys.stream("users", p), {"n": str(n)})
    clock = Clock()
    sampler = HistorySampler(redis, keys, consumers, clock=clock)

    consumers[0].counters.handled, consumers[-1].counters.retried = 3, 1
    await sampler.sample()
    clock.now += timedelta(minutes=1)
    consumers[-1].counters.dead = 1
    for p in keys.numbers:  # everything delivered: no lag left
        await redis.xreadgroup("mail", "c", {keys.stream("users", p): ">"})
    await sampler.sample()

    first, second = (await points(resources, "mail", clock, 3))[-2:]
    partitions = keys.partitions
    assert first == Point(
        minute=clock.now - timedelta(minutes=1),
        handled=3,
        failed=1,
        dead_lettered=0,
        lag=2 * partitions,
    )
    assert second == Point(minute=clock.now, handled=0, failed=0, dead_lettered=1, lag=0)
    assert sampler.unwritten == {}
    key = keys.history("mail", "handled", hour_label(first.minute))
    assert await redis.expiretime(key) == expire_at(first.minute)


async def test_a_sample_taken_while_redis_is_down_is_written_once_when_it_is_back(
    config: Config, redis_server: RedisServer, resources: Resources
) -> None:
    consumer = FakeConsumer("mail")
    clock = Clock()
    client = redis_client(config)
    try:
        sampler = HistorySampler(client, resources.keys, [consumer], clock=clock)
        consumer.counters.handled = 5
        redis_server.stop()
        await sampler.sample()  # logged, kept
        assert sampler.unwritten == {"mail": {clock.now: sampler.unwritten["mail"][clock.now]}}
        redis_server.start()
        clock.now += timedelta(minutes=1)
        consumer.counters.handled = 7
        await sampler.sample()
        await sampler.sample()
    finally:
        await client.aclose()

    taken, after = await points(resources, "mail", clock, 2)
    assert (taken.handled, after.handled) == (5, 2)
    assert sampler.unwritten == {}


async def test_the_hashes_stay_small(resources: Resources, redis: aioredis.Redis) -> None:
    """A full hour of one metric is one hash in Redis's compact encoding."""
    consumer = FakeConsumer("mail")
    clock = Clock()
    clock.now = clock.now.replace(minute=0)
    sampler = HistorySampler(resources.redis, resources.keys, [consumer], clock=clock)
    for _ in range(60):
        consumer.counters.handled += 1000
        await sampler.sample()
        clock.now += timedelta(minutes=1)
    key = resources.keys.history("mail", "handled", hour_label(clock.now - timedelta(hours=1)))
    assert await redis.hlen(key) == 60
    assert await redis.object("encoding", key) in (b"listpack", b"ziplist")
