"""``Order``: an order as an event-sourced aggregate. Its state is the fold of its own
``OrderPlaced``, ``OrderPaid`` and ``OrderClosed``; it has no row of its own.

Each command checks the state, then records its event; a save says which version it
decided on, so of two payments of one order racing in two processes exactly one
commits, and the other gets a 409 (docs/concepts/aggregates.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from sluice.app import Aggregate, Conflict, applies

from sluice_orders.events import OrderClosed, OrderPaid, OrderPlaced
from sluice_orders.schemas import OrderOut


class Order(Aggregate):
    aggregate: ClassVar[str] = "orders"
    snapshot_every: ClassVar[int] = 0  # three events at most: a snapshot saves nothing
    customer_id: str = ""
    total_cents: int = 0
    status: str = "new"
    placed_at: datetime | None = None
    closes_at: datetime | None = None
    paid_at: datetime | None = None
    closed_at: datetime | None = None

    @applies(OrderPlaced)
    def _placed(self, event: OrderPlaced) -> None:
        self.customer_id, self.total_cents = event.customer_id, event.total_cents
        self.status, self.placed_at, self.closes_at = "placed", event.occurred_at, event.closes_at

    @applies(OrderPaid)
    def _paid(self, event: OrderPaid) -> None:
        self.status, self.paid_at = "paid", event.occurred_at

    @applies(OrderClosed)
    def _closed(self, event: OrderClosed) -> None:
        self.status, self.closed_at = "closed", event.occurred_at

    def place(self, customer_id: str, total_cents: int, closes_at: datetime) -> None:
        if self.status != "new":
            raise Conflict(f"order {self.id} was placed already")
        self.record(
            OrderPlaced(
                order_id=self.id,
                customer_id=customer_id,
                total_cents=total_cents,
                closes_at=closes_at,
            )
        )

    def pay(self) -> None:
        if self.status != "placed":
            raise Conflict(f"the order is {self.status}")
        self.record(
            OrderPaid(order_id=self.id, customer_id=self.customer_id, total_cents=self.total_cents)
        )

    def close(self) -> bool:
        """Close the order if it is still unpaid; False (nothing recorded) otherwise."""
        if self.status != "placed":
            return False
        self.record(OrderClosed(order_id=self.id, customer_id=self.customer_id))
        return True

    def out(self) -> OrderOut:
        assert self.placed_at is not None and self.closes_at is not None
        return OrderOut(
            id=self.id,
            customer_id=self.customer_id,
            total_cents=self.total_cents,
            status=self.status,
            placed_at=self.placed_at,
            closes_at=self.closes_at,
            paid_at=self.paid_at,
            closed_at=self.closed_at,
        )
