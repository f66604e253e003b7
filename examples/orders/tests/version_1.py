"""``OrderPlaced`` as version 1 of the orders app wrote it: ``amount`` in euros, a float.
Appending it writes what that version wrote (the type ``OrderPlaced``, ``"v": 1``)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from sluice.app import Event


class OrderPlaced(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "orders"
    order_id: str
    customer_id: str
    amount: float
    closes_at: datetime
