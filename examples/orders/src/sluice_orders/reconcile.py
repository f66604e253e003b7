"""``reconcile-orders``: every night, the projection's totals checked against the orders."""

from __future__ import annotations

import msgspec
from sluice.app import TaskContext, utcnow

from sluice_orders.app import app
from sluice_orders.store import db_time
from sluice_orders.totals import COLUMNS

_FROM_ORDERS = """
SELECT customer_id, COUNT(*),
       SUM(CASE WHEN status = 'paid' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'closed' THEN 1 ELSE 0 END),
       SUM(total_cents),
       SUM(CASE WHEN status = 'paid' THEN total_cents ELSE 0 END)
FROM orders GROUP BY customer_id
"""


@app.task(
    "reconcile-orders",
    cron="0 30 2 * * *",
    timezone="UTC",
    description="checks the customer-totals projection against the orders table",
    timeout_seconds=600,
)
async def reconcile_orders(ctx: TaskContext) -> None:
    """Each customer's totals as the orders table has them, against the projection's.
    The projection trails the orders by the seconds its group takes; a customer that
    differs two nights in a row is a real mismatch (``sluice replay customer-totals``
    rebuilds it). The run's outcome is its run record; the customers that differed
    are kept in ``order_reconciliations``."""
    store = ctx.resources.store
    truth = {
        str(row[0]): tuple(int(v) for v in row[1:]) for row in await store.fetchall(_FROM_ORDERS)
    }
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
