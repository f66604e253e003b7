"""Request and response bodies of the ``orders`` routes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

CUSTOMER_ID = "^[A-Za-z0-9_-]{1,64}$"
MAX_CENTS = 100_000_000
# The rules are checked by the view (422 naming the field), not by decoding (which answers
# 400 for a body of the wrong shape), so they appear here only for the OpenAPI document.
CustomerId = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": CUSTOMER_ID})]
Cents = Annotated[int, msgspec.Meta(extra_json_schema={"minimum": 1, "maximum": MAX_CENTS})]


class PlaceOrder(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    customer_id: CustomerId
    total_cents: Cents


class OrderOut(msgspec.Struct, kw_only=True):
    id: str
    customer_id: str
    total_cents: int
    status: Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["placed", "paid", "closed"]})]
    placed_at: datetime
    closes_at: datetime
    paid_at: datetime | None = None
    closed_at: datetime | None = None


class CustomerTotals(msgspec.Struct, kw_only=True):
    customer_id: str
    placed: int
    paid: int
    closed: int
    placed_cents: int
    paid_cents: int
    points: int
