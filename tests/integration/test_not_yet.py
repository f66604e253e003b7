"""``NotYet``, the outcome of an entry that can only wait: it comes back after the wait
it names without spending a delivery, however often it waits, is never dead-lettered
for it, and no attempt is recorded for its waits (docs/guides/write-an-app.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sluice.app import NotYet
from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from tests.engine_app import APPS, Pinged

pytestmark = [pytest.mark.topologies("single"), pytest.mark.apps(APPS)]

TOKEN = "not-yet-admin-token-0123456789abcdef"
Client = TestClient[Any, Any]


@pytest.fixture
async def admin(
    make_config: Callable[..., Config],
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> Client:
    return await aiohttp_client(create_app(make_config(admin_token=TOKEN)))


async def test_an_entry_that_waits_more_often_than_its_deliveries_is_handled_once(
    admin: Client,
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    seen: list[int] = []

    async def busy_five_times(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        seen.extend(d.message.deliveries for d in ds)
        if len(seen) <= 5:
            return {d.message.key: NotYet("the receiver is busy", 0.05) for d in ds}
        return {}

    config = make_config(retry_base_ms=40, max_deliveries=2)
    async with resources.store.transaction() as tx:
        await tx.append(Pinged(source="w1", trace_id="waits-trace-1"))
    start_relay()
    consumer = start_worker(
        spec=GroupSpec("waiter", ("pings",), busy_five_times), config=config, name="w1"
    )

    async def handled() -> bool:
        return consumer.counters.handled == 1

    await wait_for(handled, timeout=30)
    assert seen == [1] * 6, "every wait came back as the same, first delivery"
    assert consumer.counters.retried == consumer.counters.dead == 0
    dead = await resources.redis.xlen(resources.keys.dead("waiter", 0))
    assert dead == 0
    response = await admin.get(
        "/v1/admin/traces/waits-trace-1", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    story = await response.json()
    tried = [
        (d["attempt"], d["outcome"])
        for e in story["events"]
        for d in e["deliveries"]
        if d["group"] == "waiter"
    ]
    assert tried == [(1, "handled")], "a wait is no attempt"
