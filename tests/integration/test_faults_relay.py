"""The relay never loses a committed event (docs/concepts/index.md) and its re-publications are
applied once (docs/concepts/index.md): kill -9 of the relay process mid-stream, and the same
events published twice under different stream ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from sluice.app.testing import Child, wait_for
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION, Relay
from tests.integration.faults_helpers import (
    Trickle,
    commit_views_at_once,
    committed_event_ids,
    settle,
    stream_event_ids,
)
from tests.integration.helpers import post_views

ARTICLE = "hot"


@pytest.mark.slow
async def test_relay_killed_mid_stream_loses_no_committed_event(
    resources: Resources,
    redis: aioredis.Redis,
    start_worker: Callable[..., Consumer],
    spawn: Callable[..., Child],
) -> None:
    burst = 2000
    stream = resources.keys.stream("articles")
    start_worker()
    # Small batches: many XADD-then-save-position windows for the kill to land in.
    relay = spawn("relay", SLUICE_RELAY_BATCH="20")

    async def relay_leads() -> bool:
        return bool(await redis.exists(resources.keys.relay_lock()))

    await wait_for(relay_leads)
    # A burst keeps the relay busy while views keep being committed one by one.
    await commit_views_at_once(resources, ARTICLE, burst, start=0)
    trickle = Trickle(resources, ARTICLE, start=burst)

    async def relay_is_streaming() -> bool:
        return await redis.xlen(stream) >= 300

    await wait_for(relay_is_streaming, interval=0.005)
    relay.kill()
    # Commits go on while no relay runs.
    await trickle.until(trickle.committed + 200)
    total = burst + await trickle.stop()

    position = await resources.store.position(POSITION)
    assert position < total, "the dead relay published everything: nothing was tested"
    # The killed relay still holds its lock until the TTL runs out; the new
    # one takes over then, from the stored position.
    spawn("relay", SLUICE_RELAY_BATCH="20")
    state = await settle(resources, redis, ARTICLE, total)

    published = await stream_event_ids(redis, stream)
    assert await committed_event_ids(resources) <= set(published)
    assert state.entries >= total  # duplicates allowed, none missing


@pytest.mark.parametrize(
    "n",
    [
        pytest.param(40, id="both-copies-in-one-batch"),
        pytest.param(250, id="copies-in-different-batches"),
    ],
)
async def test_same_events_published_twice_are_counted_once(
    n: int,
    resources: Resources,
    redis: aioredis.Redis,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    stream = resources.keys.stream("articles")
    await post_views(resources, ARTICLE, n)
    events = await resources.store.events_after(0, n)
    assert len(events) == n
    async with Relay(resources.store, resources.redis, resources.keys) as publisher:
        await publisher.publish(events)
        await publisher.publish(events)

    entries: Any = await redis.xrange(stream)
    assert len(entries) == 2 * n
    assert len({entry_id for entry_id, _ in entries}) == 2 * n  # different stream ids
    assert len({fields[b"event_id"] for _, fields in entries}) == n  # same event ids

    # The worker's batch (100) holds both copies when n is small; the running
    # relay then publishes a third copy from its stored position 0.
    start_worker()
    start_relay()
    state = await settle(resources, redis, ARTICLE, n)
    assert state.entries >= 3 * n  # the relay may publish a batch more than once
