"""The ``customer-totals`` projection: per customer, orders placed, paid and closed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sluice.app import Event, ProjectionContext, Tx

from sluice_orders.app import app
from sluice_orders.events import OrderClosed, OrderPaid, OrderPlaced

CUSTOMER_TOTALS = """
CREATE TABLE customer_totals{s} (
    customer_id TEXT PRIMARY KEY,
    placed INTEGER NOT NULL,
    paid INTEGER NOT NULL,
    closed INTEGER NOT NULL,
    placed_cents INTEGER NOT NULL,
    paid_cents INTEGER NOT NULL
) WITHOUT ROWID;
"""
COLUMNS = ("placed", "paid", "closed", "placed_cents", "paid_cents")

totals = app.projection(
    "customer-totals",
    events=(OrderPlaced, OrderPaid, OrderClosed),
    schema=CUSTOMER_TOTALS,
    tables=("customer_totals",),
)


@totals.apply
async def apply(events: Sequence[Event], tx: Tx, ctx: ProjectionContext) -> None:
    """A batch's events summed per customer, then added to their rows in one statement."""
    sums: dict[str, Counter[str]] = {}
    for event in events:
        if isinstance(event, OrderPlaced):
            add = {"placed": 1, "placed_cents": event.total_cents}
        elif isinstance(event, OrderPaid):
            add = {"paid": 1, "paid_cents": event.total_cents}
        elif isinstance(event, OrderClosed):
            add = {"closed": 1}
        else:
            continue
        sums.setdefault(event.customer_id, Counter()).update(add)
    if not sums:
        return
    await tx.upsert_rows(
        ctx.table("customer_totals"),
        ("customer_id", *COLUMNS),
        [(customer, *(n[c] for c in COLUMNS)) for customer, n in sorted(sums.items())],
        keys=("customer_id",),
        add=COLUMNS,
    )
