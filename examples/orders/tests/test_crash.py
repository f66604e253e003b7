"""``kill -9`` of the loyalty worker in the middle of its work: each payment's points are
credited once, whatever the worker had done, committed or acked when it died."""

from __future__ import annotations

from sluice.app import utcnow, uuid7
from sluice.app.testing import wait_for

from sluice_orders.events import OrderPaid, OrderPlaced
from sluice_orders.store import db_time
from tests.shop import Shop

ORDERS = 1500
CUSTOMERS = 7


async def _paid_orders(shop: Shop) -> int:
    """``ORDERS`` orders placed and paid, committed as the routes commit them (in batches,
    to be quick); the points they are worth."""
    points = 0
    for start in range(0, ORDERS, 250):
        async with shop.store.transaction() as tx:
            for n in range(start, min(start + 250, ORDERS)):
                order_id, customer, cents, now = uuid7(), f"k{n % CUSTOMERS}", 100 + n * 7, utcnow()
                await tx.execute(
                    "INSERT INTO orders (id, customer_id, total_cents, status, placed_at,"
                    " closes_at, paid_at) VALUES (?, ?, ?, 'paid', ?, ?, ?)",
                    (order_id, customer, cents, db_time(now), db_time(now), db_time(now)),
                )
                await tx.append(
                    OrderPlaced(order_id=order_id, customer_id=customer, total_cents=cents,
                                closes_at=now),
                    OrderPaid(order_id=order_id, customer_id=customer, total_cents=cents),
                )  # fmt: skip
                points += cents // 100
    return points


async def test_kill_9_of_the_loyalty_worker_mid_batch_credits_each_payment_once(
    shop: Shop,
) -> None:
    points = await _paid_orders(shop)
    shop.start("relay")
    worker = shop.start("worker", "loyalty")
    handled = "SELECT COUNT(*) FROM handled_events WHERE group_name = 'loyalty'"

    async def working() -> bool:
        return await shop.count(handled) > 0

    await wait_for(working, timeout=30)
    worker.kill()
    at_kill = await shop.count(handled)
    assert 0 < at_kill < ORDERS  # killed in the middle
    shop.start("worker", "loyalty")  # the same consumer name: it takes its pending entries back

    async def all_credited() -> bool:
        return await shop.count(handled) == ORDERS

    await wait_for(all_credited, timeout=120)
    assert await shop.count("SELECT SUM(points) FROM loyalty_points") == points
    credited = "SELECT COUNT(*) FROM events WHERE type = 'PointsCredited'"
    assert await shop.count(credited) == ORDERS
    once_each = "SELECT COUNT(DISTINCT payload) FROM events WHERE type = 'PointsCredited'"
    assert await shop.count(once_each) == ORDERS  # (each payload names its own order)
