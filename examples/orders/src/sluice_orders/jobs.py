"""``close-order``: the delayed job that closes an order nobody paid."""

from __future__ import annotations

import msgspec
from sluice.app import JobContext, Tx

from sluice_orders.app import app
from sluice_orders.order import Order


class CloseOrder(msgspec.Struct, frozen=True, kw_only=True):
    order_id: str


@app.job("close-order", payload=CloseOrder)
async def close_order(job: CloseOrder, tx: Tx, ctx: JobContext) -> None:
    """Close the order if it is still unpaid. The payment cancels this job in its own
    transaction; a payment saved after the job fell due but before this transaction
    leaves the order paid here, and one saved in between raises ``VersionConflict``
    here (the job runs again and finds it paid), so a paid order is never closed."""
    order = await Order.find(tx, job.order_id)
    if order is None or not order.close():
        ctx.log.info("order not closed: paid or gone", order_id=job.order_id)
        return
    await order.save(tx)
