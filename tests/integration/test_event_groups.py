"""Per-event handler groups: dispatch by type, a concurrency limit, per-event failures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from sluice.app.testing import wait_for
from sluice.consumers.consumer import Consumer
from sluice.consumers.dispatch import event_group
from sluice.errors import HandlerError
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.engine_app import APPS, Pinged
from tests.integration.helpers import post_pings

pytestmark = [
    pytest.mark.topologies("single", "cluster"),
    pytest.mark.apps(APPS),
]


async def test_handlers_run_at_most_the_limit_at_once_and_fail_one_by_one(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., Consumer]
) -> None:
    state = {"now": 0, "peak": 0}
    done: list[str] = []
    release = asyncio.Event()

    async def on_pinged(event: Pinged, deps: object) -> None:
        assert deps == "deps"
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        try:
            await release.wait()
            if event.note == "ping-3":
                raise HandlerError("mailbox full", permanent=True)
            done.append(event.note)
        finally:
            state["now"] -= 1

    relay = start_relay()
    await post_pings(resources, "p", 10)

    async def published() -> bool:
        return relay.published == 10

    await wait_for(published)
    spec = event_group("limited", ("pings",), {Pinged: on_pinged}, "deps", 3)
    consumer = start_worker(spec=spec)

    async def saturated() -> bool:
        return state["now"] == 3

    await wait_for(saturated)
    release.set()

    async def settled() -> bool:
        return consumer.counters.handled == 9 and consumer.counters.dead == 1

    await wait_for(settled)
    assert state["peak"] == 3
    assert sorted(done) == sorted(f"ping-{i}" for i in range(10) if i != 3)
    [(_, dead)] = await resources.redis.xrange(
        resources.keys.dead("limited", resources.keys.partition_of("p"))
    )
    assert dead[b"deliveries"] == b"1"  # permanent: no retries
    assert b"mailbox full" in dead[b"error"]
