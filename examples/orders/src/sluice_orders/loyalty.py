"""The ``loyalty`` group: one point per whole euro of a paid order, credited once."""

from __future__ import annotations

from sluice.app import HandlerContext, Tx, utcnow

from sluice_orders.app import app
from sluice_orders.events import OrderPaid, PointsCredited
from sluice_orders.store import db_time

loyalty = app.group("loyalty", retry_base_ms=500, max_deliveries=8, timeout_seconds=30)


@loyalty.once(OrderPaid)
async def credit_points(event: OrderPaid, tx: Tx, ctx: HandlerContext) -> None:
    """In the transaction that records this group handled the payment: a redelivery (a
    worker killed after the commit, a reclaim, the relay publishing twice) finds the
    record and credits nothing more."""
    points = event.total_cents // 100
    await tx.execute(
        "INSERT INTO loyalty_points (customer_id, points, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (customer_id) DO UPDATE SET"
        " points = loyalty_points.points + excluded.points, updated_at = excluded.updated_at",
        (event.customer_id, points, db_time(utcnow())),
    )
    await tx.append(
        PointsCredited(customer_id=event.customer_id, order_id=event.order_id, points=points)
    )
