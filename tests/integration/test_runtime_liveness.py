"""Long handlers keep their entries; lost groups come back; commits wake the relay."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from sluice.app.assembly import open_store
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.notify import CommitNotifier
from sluice.relay.relay import Relay
from sluice.store import StoredEvent
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from tests.integration.helpers import post_views, views

pytestmark = pytest.mark.topologies("single", "cluster")


async def test_a_long_handler_keeps_its_entries_from_being_reclaimed(
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(claim_idle_ms=300)
    calls: Counter[str] = Counter()
    slow_started = asyncio.Event()

    async def slow(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        for d in ds:
            calls[d.event.event_id] += 1
        slow_started.set()
        await asyncio.sleep(1.5)  # the work itself: five times the claim idle time
        return {}

    async def fast(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        for d in ds:
            calls[d.event.event_id] += 1
        return {}

    relay = start_relay()
    await post_views(resources, "long", 5)

    async def published() -> bool:
        return relay.published == 5

    await wait_for(published)
    first = start_worker(spec=GroupSpec("g", ("articles",), slow), name="slow", config=config)
    await asyncio.wait_for(slow_started.wait(), 10)
    start_worker(spec=GroupSpec("g", ("articles",), fast), name="thief", config=config)

    async def slow_finished() -> bool:
        return first.counters.handled == 5

    await wait_for(slow_finished)
    assert len(calls) == 5
    assert set(calls.values()) == {1}, "an entry was reclaimed while its handler still ran"


async def test_a_deleted_group_is_recreated_and_consumption_goes_on(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., Consumer]
) -> None:
    start_relay()
    start_worker()
    await post_views(resources, "ng", 5)

    async def five() -> bool:
        return await views(resources, "ng") == 5

    await wait_for(five)
    stream = resources.keys.stream("articles", resources.keys.partition_of("ng"))
    await resources.redis.xgroup_destroy(stream, "article-views")
    await post_views(resources, "ng", 5, start=5)

    async def ten() -> bool:
        return await views(resources, "ng") == 10

    await wait_for(ten)  # the recreated group reads from 0: old entries are deduped


async def test_a_commit_in_another_process_wakes_the_relay(
    config: Config, resources: Resources, start_relay: Callable[..., Relay]
) -> None:
    relay = start_relay(poll_ms=60_000)  # polling alone would take a minute
    await wait_for(lambda: _subscribed(resources))
    other_store = await open_store(config)  # as an API process would have
    notifier = CommitNotifier(resources.redis, resources.keys.outbox_channel())
    other_store.add_commit_listener(notifier.notify)
    try:
        await post_views(Resources(config, other_store, resources.redis, resources.keys), "w", 1)

        async def published() -> bool:
            return relay.published == 1

        await wait_for(published, timeout=5)
    finally:
        await notifier.close()
        await other_store.close()


async def test_a_commit_announced_while_the_relay_reads_is_not_left_for_the_next_poll(
    resources: Resources, start_relay: Callable[..., Relay], monkeypatch: pytest.MonkeyPatch
) -> None:
    relay = start_relay(poll_ms=60_000)
    read = resources.store.events_after
    committed = False

    async def events_after(seq: int, limit: int, **kwargs: Any) -> list[StoredEvent]:
        nonlocal committed
        events = await read(seq, limit, **kwargs)
        if not events and not committed:  # lands after the read, before the relay waits
            committed = True
            await post_views(resources, "race", 1)  # its commit sets relay.wake
        return events

    monkeypatch.setattr(resources.store, "events_after", events_after)

    async def published() -> bool:
        return relay.published == 1

    await wait_for(published, timeout=5)
    assert committed


async def _subscribed(resources: Resources) -> bool:
    channel = resources.keys.outbox_channel()
    counts = await resources.redis.pubsub_numsub(channel)
    return bool(counts and counts[0][1] >= 1)
