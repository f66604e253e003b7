"""Twenty payments of one order at once, through the API's real process: the ``Order``
aggregate lets exactly one commit (docs/concepts/aggregates.md); the others are 409s,
the history holds one ``OrderPaid`` and the points are credited once. On SQLite and on
PostgreSQL (where the transactions really overlap and the losers meet the version
already taken), each on one Redis and on a Redis Cluster (``sluice_topology``: the
processes' Redis is the cluster, and the payment is relayed and credited through it)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import aiohttp
from sluice.app import Config
from sluice.app.testing import Child, free_port, open_deployment, wait_answering, wait_for

from sluice_orders.events import OrderPaid, PointsCredited
from tests.shop import APPS

PAYMENTS = 20


async def test_of_twenty_payments_at_once_exactly_one_commits_and_credits_once(
    sluice_config: Callable[..., Config], sluice_spawn: Callable[..., Child], sluice_topology: str
) -> None:
    config = sluice_config(APPS, port=free_port())
    async with open_deployment(config) as deployment:
        sluice_spawn(config, "api")
        url = f"http://127.0.0.1:{config.port}"
        await wait_answering([url])
        async with aiohttp.ClientSession(url) as http:
            async with http.post(
                "/v1/orders", json={"customer_id": "zoe", "total_cents": 4321}
            ) as r:
                assert r.status == 201, await r.text()
                order_id = (await r.json())["id"]

            async def look() -> None:
                async with http.get(f"/v1/orders/{order_id}") as response:
                    assert response.status == 200

            # Twenty connections open first, so the payments arrive together.
            await asyncio.gather(*(look() for _ in range(PAYMENTS)))

            async def pay() -> int:
                async with http.post(f"/v1/orders/{order_id}/payment") as response:
                    await response.read()
                    return response.status

            statuses = Counter(await asyncio.gather(*(pay() for _ in range(PAYMENTS))))
            assert statuses == {200: 1, 409: PAYMENTS - 1}
            async with http.get(f"/v1/orders/{order_id}") as r:
                assert (await r.json())["status"] == "paid"

        assert [e.order_id for e in await deployment.events(OrderPaid)] == [order_id]
        assert config.cluster == (sluice_topology == "cluster")
        sluice_spawn(config, "relay")
        sluice_spawn(config, "worker", "loyalty")

        async def credited() -> bool:
            return len(await deployment.handled("loyalty")) == 1

        await wait_for(credited, timeout=60)
        points = await deployment.events(PointsCredited)
        assert [(e.order_id, e.points) for e in points] == [(order_id, 43)]
