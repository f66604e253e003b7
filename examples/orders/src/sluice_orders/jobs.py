"""``close-order``: the delayed job that closes an order nobody paid."""

from __future__ import annotations

import msgspec
from sluice.app import JobContext, Tx, utcnow

from sluice_orders.app import app
from sluice_orders.events import OrderClosed
from sluice_orders.store import db_time


class CloseOrder(msgspec.Struct, frozen=True, kw_only=True):
    order_id: str


@app.job("close-order", payload=CloseOrder)
async def close_order(job: CloseOrder, tx: Tx, ctx: JobContext) -> None:
    """Close the order if it is still unpaid. The payment cancels this job in its own
    transaction; one that came after the job fell due finds the order paid here (the
    row lock orders the two), so a paid order is never closed."""
    row = await tx.fetchone(
        "SELECT customer_id, status FROM orders WHERE id = ?" + tx.dialect.row_lock("update"),
        (job.order_id,),
    )
    if row is None or row[1] != "placed":
        ctx.log.info("order not closed: paid or gone", order_id=job.order_id)
        return
    await tx.execute(
        "UPDATE orders SET status = 'closed', closed_at = ? WHERE id = ?",
        (db_time(utcnow()), job.order_id),
    )
    await tx.append(OrderClosed(order_id=job.order_id, customer_id=str(row[0])))
