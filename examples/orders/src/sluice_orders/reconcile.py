"""``reconcile-orders``: every night, the projection's totals checked against the orders,
each folded from its own events (the ``Order`` aggregate)."""

from __future__ import annotations

import msgspec
from sluice.app import Store, TaskContext, utcnow

from sluice_orders.app import app
from sluice_orders.order import Order
from sluice_orders.store import db_time
from sluice_orders.totals import COLUMNS


async def _from_orders(store: Store) -> dict[str, tuple[int, ...]]:
    """Each customer's (placed, paid, closed, placed cents, paid cents), from the orders
    themselves: one load per order, which a shop of a few million orders would spread
    over several runs (or check a sample of)."""
    totals: dict[str, list[int]] = {}
    for order_id in await Order.ids(store):
        order = await Order.load(store, order_id)
        paid = order.status == "paid"
        row = totals.setdefault(order.customer_id, [0, 0, 0, 0, 0])
        for n, value in enumerate(
            (1, paid, order.status == "closed", order.total_cents, paid * order.total_cents)
        ):
            row[n] += value
    return {customer: tuple(row) for customer, row in totals.items()}


@app.task(
    "reconcile-orders",
    cron="0 30 2 * * *",
    timezone="UTC",
    description="checks the customer-totals projection against the orders",
    timeout_seconds=600,
)
async def reconcile_orders(ctx: TaskContext) -> None:
    """Each customer's totals as the orders have them, against the projection's.
    The projection trails the orders by the seconds its group takes; a customer that
    differs two nights in a row is a real mismatch (``sluice replay customer-totals``
    rebuilds it). The run's outcome is its run record; the customers that differed
    are kept in ``order_reconciliations``."""
    store = ctx.resources.store
    truth = await _from_orders(store)
    kept = {
        str(row[0]): tuple(int(v) for v in row[1:])
        for row in await store.fetchall(
            f"SELECT customer_id, {', '.join(COLUMNS)} FROM customer_totals"
        )
    }
    mismatched = sorted(c for c in truth.keys() | kept.keys() if truth.get(c) != kept.get(c))
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO order_reconciliations (run_id, checked_at, customers, mismatched)"
            " VALUES (?, ?, ?, ?)",
            (ctx.run.id, db_time(utcnow()), len(truth), msgspec.json.encode(mismatched).decode()),
        )
    log = ctx.log.warning if mismatched else ctx.log.info
    log("orders reconciled", customers=len(truth), mismatched=len(mismatched))
