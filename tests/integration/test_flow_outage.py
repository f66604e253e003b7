"""A flow group's consumer stopped while a service is down: the entry it holds through
the outage stays pending (as any group's batch in hand), those waiting for their turn
stay parked, and a restart handles every one of them once (docs/guides/write-an-app.md,
"Flow control")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

from sluice.app.testing import wait_for
from sluice.consumers.consumer import Consumer
from sluice.errors import ServiceUnavailable
from sluice.flow.limiter import Limiter
from sluice.flow.spec import Flow
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.streams.messages import Delivery, Outcomes
from sluice.streams.spec import GroupSpec, runtime_settings
from tests.integration.faults_helpers import pending_of
from tests.integration.helpers import post_views

FLOW = Flow(key="article_id", concurrency=1)


async def test_a_flow_group_stopped_in_an_outage_loses_and_repeats_nothing(
    resources: Resources, start_relay: Callable[..., Relay]
) -> None:
    handled: list[str] = []
    down, entered = True, asyncio.Event()

    async def handler(deliveries: Sequence[Delivery]) -> Outcomes:
        entered.set()
        if down:
            return {d.message.key: ServiceUnavailable("down") for d in deliveries}
        handled.extend(d.event.event_id for d in deliveries)
        return {}

    spec = GroupSpec("flowing", ("articles",), handler, flow=FLOW)
    settings = replace(runtime_settings(resources.config), block_ms=100, retry_base_ms=200)
    limiter = Limiter(resources.redis, resources.keys, "flowing", FLOW, 60_000)

    def consumer() -> Consumer:
        return Consumer(spec, resources.redis, resources.keys, "w1", settings)

    start_relay()
    stop = asyncio.Event()
    first = asyncio.create_task(consumer().run(stop))
    await post_views(resources, "a1", 3)
    await asyncio.wait_for(entered.wait(), 20)

    async def parked() -> bool:
        return await limiter.waiting("a1") == 2

    await wait_for(parked)
    stop.set()
    await asyncio.wait_for(first, 20)  # ends cleanly, the held entry left pending
    assert (
        await pending_of(resources.redis, resources.keys.stream("articles"), "w1", "flowing") == 1
    )

    down, stop = False, asyncio.Event()
    second = asyncio.create_task(consumer().run(stop))

    async def all_handled() -> bool:
        return len(handled) >= 3

    try:
        await wait_for(all_handled)
    finally:
        stop.set()
        await asyncio.wait_for(second, 20)
    assert len(handled) == len(set(handled)) == 3
    assert await limiter.waiting("a1") == 0
