"""The events of the ``orders`` app.

``OrderPlaced`` is at version 2: version 1 of the app stored ``amount``, a float in
euros; version 2 stores ``total_cents``. The upcaster below turns a stored version 1
payload into version 2, so a replay of a history written by version 1 builds the
totals version 2 expects.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from sluice.app import Event, Payload

from sluice_orders.app import app


@app.event
class OrderPlaced(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "orders"
    v: int = 2
    order_id: str
    customer_id: str
    total_cents: int
    closes_at: datetime


@app.upcaster(OrderPlaced, from_version=1)
def _amount_in_cents(payload: Payload) -> Payload:
    """Version 1 said ``amount`` (euros, a float); version 2 says ``total_cents``."""
    payload["total_cents"] = round(payload.pop("amount") * 100)
    return payload


@app.event
class OrderPaid(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "orders"
    order_id: str
    customer_id: str
    total_cents: int


@app.event
class OrderClosed(Event, frozen=True, kw_only=True, tag=True):
    """Closed unpaid: its ``close-order`` job fell due before a payment."""

    aggregate: ClassVar[str] = "orders"
    order_id: str
    customer_id: str


@app.event
class PointsCredited(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "loyalty"
    customer_id: str
    order_id: str
    points: int
