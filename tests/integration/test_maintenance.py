"""Bounded Redis: trimming only what every group acked, reaping idle consumers, status."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sluice.app.assembly import default_apps
from sluice.app.testing import wait_for
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.records.maintenance import reap_consumers, status, trim_streams
from sluice.relay.relay import Relay
from tests.integration.helpers import post_views, views

pytestmark = pytest.mark.topologies("single", "cluster")


async def test_trim_keeps_entries_a_group_has_not_acked(
    resources: Resources, start_relay: Callable[..., Relay]
) -> None:
    keys = resources.keys
    redis, stream = resources.redis, keys.stream("articles", keys.partition_of("t"))
    relay = start_relay()
    await post_views(resources, "t", 10)

    async def published() -> bool:
        return relay.published == 10

    await wait_for(published)
    await redis.xgroup_create(stream, "fast", id="0")
    await redis.xgroup_create(stream, "slow", id="0")
    fast: Any = await redis.xreadgroup("fast", "f", {stream: ">"}, count=100)
    await redis.xack(stream, "fast", *[eid for eid, _ in fast[0][1]])
    slow: Any = await redis.xreadgroup("slow", "s", {stream: ">"}, count=4)
    slow_ids = [eid for eid, _ in slow[0][1]]
    await redis.xack(stream, "slow", *slow_ids[:2])  # two acked, two pending, six unread

    removed = await trim_streams(redis, resources.keys, retention_s=0)

    assert removed[stream] == 2
    entries: Any = await redis.xrange(stream)
    remaining = [eid for eid, _ in entries]
    assert remaining[0] == slow_ids[2]
    assert len(remaining) == 8


async def test_a_group_whose_worker_never_ran_keeps_every_event_through_a_trim(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., Consumer]
) -> None:
    """The relay makes every registered group on its streams before it publishes, so a
    trim before a group's first worker starts (a group added by an upgrade, a worker not
    deployed yet) removes nothing that group has not read: the worker then counts all."""
    relay = start_relay(groups=default_apps().aggregates)  # as `sluice relay` has them
    await post_views(resources, "late", 30)

    async def published() -> bool:
        return relay.published == 30

    await wait_for(published)
    stream = resources.keys.stream("articles", resources.keys.partition_of("late"))
    assert await trim_streams(resources.redis, resources.keys, retention_s=0) == {stream: 0}
    start_worker()

    async def counted() -> bool:
        return await views(resources, "late") == 30

    await wait_for(counted)


async def test_trim_respects_retention_and_keeps_the_newest_entry(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., Consumer]
) -> None:
    start_relay()
    start_worker()
    await post_views(resources, "r", 5)
    stream = resources.keys.stream("articles", resources.keys.partition_of("r"))

    async def counted_and_acked() -> bool:  # an entry not acked yet is kept by the trim
        if await views(resources, "r") != 5:
            return False
        pending: Any = await resources.redis.xpending(stream, "article-views")
        return int(pending["pending"]) == 0

    await wait_for(counted_and_acked)
    assert (await trim_streams(resources.redis, resources.keys, retention_s=3600))[stream] == 0
    assert (await trim_streams(resources.redis, resources.keys, retention_s=0))[stream] == 4
    assert await resources.redis.xlen(stream) == 1


async def test_reap_removes_idle_consumers_with_nothing_pending(resources: Resources) -> None:
    redis, stream = resources.redis, resources.keys.stream("articles")
    await redis.xadd(stream, {"event_id": "e1", "data": "{}"})
    await redis.xadd(stream, {"event_id": "e2", "data": "{}"})
    await redis.xgroup_create(stream, "g", id="0")
    done: Any = await redis.xreadgroup("g", "done", {stream: ">"}, count=1)
    await redis.xack(stream, "g", done[0][1][0][0])
    await redis.xreadgroup("g", "busy", {stream: ">"}, count=1)  # keeps one pending

    reaped = await reap_consumers(redis, resources.keys, idle_ms=0)

    assert reaped == [f"{stream}/g/done"]
    names = {c["name"] for c in await redis.xinfo_consumers(stream, "g")}
    assert names == {b"busy"}


async def test_status_reports_lag_pending_dead_letters_and_backlog(resources: Resources) -> None:
    await post_views(resources, "s", 3)  # committed, not relayed: backlog 3
    keys = resources.keys
    partition = keys.partition_of("s")
    redis, stream = resources.redis, keys.stream("articles", partition)
    for i in range(4):
        await redis.xadd(stream, {"event_id": f"e{i}", "data": "{}"})
    await redis.xgroup_create(stream, "article-views", id="0")
    await redis.xreadgroup("article-views", "c", {stream: ">"}, count=1)
    await redis.xadd(keys.dead("article-views", partition), {"event_id": "x"})

    report = await status(redis, resources.keys, resources.store)

    assert report.relay_backlog == 3
    [articles] = [s for s in report.streams if s.stream == stream]
    assert (articles.length, articles.partition) == (4, partition)
    [group] = articles.groups
    assert (group.group, group.consumers, group.pending, group.dead_letters) == (
        "article-views",
        1,
        1,
        1,
    )
    assert group.lag in (3, None)  # Redis 7 reports lag; 6.2 does not
