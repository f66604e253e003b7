"""``kill -9`` in the middle of the work: of the loyalty worker (each payment's points are
credited once, whatever the worker had done, committed or acked when it died) and of
the API (each order's versions and events stay one set). Real processes, on both
stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
from sluice.app import Config, utcnow, uuid7
from sluice.app.testing import (
    Child,
    Deployment,
    free_port,
    open_deployment,
    wait_answering,
    wait_for,
)

from sluice_orders.events import OrderPaid, OrderPlaced, PointsCredited
from sluice_orders.order import Order
from tests.shop import APPS

ORDERS = 1500
CUSTOMERS = 7


async def _paid_orders(deployment: Deployment) -> int:
    """``ORDERS`` orders placed and paid, committed as the routes commit them (in batches,
    to be quick); the points they are worth."""
    points = 0
    for start in range(0, ORDERS, 250):
        async with deployment.store.transaction() as tx:
            for n in range(start, min(start + 250, ORDERS)):
                order, cents = Order(uuid7()), 100 + n * 7
                order.place(f"k{n % CUSTOMERS}", cents, utcnow())
                order.pay()
                await order.save(tx)
                points += cents // 100
    return points


async def test_kill_9_of_the_loyalty_worker_mid_batch_credits_each_payment_once(
    deployment: Deployment, sluice_spawn: Callable[..., Child]
) -> None:
    points = await _paid_orders(deployment)
    sluice_spawn(deployment.config, "relay")
    worker = sluice_spawn(deployment.config, "worker", "loyalty")

    async def handled() -> int:
        return len(await deployment.handled("loyalty"))

    async def working() -> bool:
        return await handled() > 0

    await wait_for(working, timeout=30)
    worker.kill()
    at_kill = await handled()
    assert 0 < at_kill < ORDERS  # killed in the middle
    # The same consumer name: it takes its pending entries back.
    sluice_spawn(deployment.config, "worker", "loyalty")

    async def all_credited() -> bool:
        return await handled() == ORDERS

    await wait_for(all_credited, timeout=120, interval=0.2)
    row = await deployment.store.fetchone("SELECT SUM(points) FROM loyalty_points")
    assert row is not None and int(row[0]) == points
    credited = await deployment.events(PointsCredited)
    assert len(credited) == ORDERS
    assert len({e.order_id for e in credited}) == ORDERS  # each order's points once


async def test_kill_9_of_the_api_mid_payment_loses_and_doubles_nothing(
    sluice_config: Callable[..., Config], sluice_spawn: Callable[..., Child]
) -> None:
    """Orders placed and paid at full speed while the API process is killed: what was
    answered is there, and every order's saved versions and its events are the same
    set, once each, whatever the kill cut (a transaction between its save and its
    commit leaves neither)."""
    config = sluice_config(APPS, port=free_port())
    url = f"http://127.0.0.1:{config.port}"
    async with open_deployment(config) as deployment:
        api = sluice_spawn(config, "api")
        await wait_answering([url])
        placed: set[str] = set()
        paid: set[str] = set()

        async def shop(http: aiohttp.ClientSession, n: int) -> None:
            while True:
                try:
                    body = {"customer_id": f"k{n}", "total_cents": 100 + n}
                    async with http.post("/v1/orders", json=body) as r:
                        if r.status != 201:
                            return
                        order_id = (await r.json())["id"]
                    placed.add(order_id)
                    async with http.post(f"/v1/orders/{order_id}/payment") as r:
                        if r.status == 200:
                            paid.add(order_id)
                except aiohttp.ClientError:
                    return

        async with aiohttp.ClientSession(url) as http:
            shoppers = [asyncio.create_task(shop(http, n)) for n in range(8)]

            async def busy() -> bool:
                return len(paid) >= 50

            await wait_for(busy, timeout=60)
            api.kill()
            await asyncio.gather(*shoppers)

        versions = await deployment.store.fetchall(
            "SELECT a.aggregate_id, a.version, e.type FROM aggregate_events a"
            " LEFT JOIN events e ON e.event_id = a.event_id WHERE a.aggregate = 'orders'"
        )
        assert all(kind is not None for _, _, kind in versions)  # no version without its event
        saved = {(str(i), int(v)) for i, v, _ in versions}
        events = await deployment.events(OrderPlaced, OrderPaid)
        assert len(events) == len(saved)  # no event without its version, none twice
        orders = {str(i) for i, _, _ in versions}
        assert placed <= orders
        for order_id in orders:
            order = await Order.load(deployment.store, order_id)
            assert order.status == ("paid" if order.version == 2 else "placed")
            assert order_id not in paid or order.status == "paid"
