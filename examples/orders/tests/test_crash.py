"""``kill -9`` of the loyalty worker in the middle of its work: each payment's points are
credited once, whatever the worker had done, committed or acked when it died. Real
processes, on both stores."""

from __future__ import annotations

from collections.abc import Callable

from sluice.app import utcnow, uuid7
from sluice.app.testing import Child, Deployment, wait_for

from sluice_orders.events import PointsCredited
from sluice_orders.order import Order

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
