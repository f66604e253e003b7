"""The orders app in a harness (``sluice.app.testing``), and a client of its API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice.app.testing import Harness

# Every built-in app beside the orders app, as `SLUICE_APPS=default,sluice_orders sluice up`.
APPS = "default,sluice_orders"
ADMIN_TOKEN = "orders-tests-admin-token-of-forty-characters"


@dataclass
class Shop:
    h: Harness

    async def call(
        self, method: str, path: str, status: int, *, admin: bool = False, **body: Any
    ) -> Any:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"} if admin else {}
        async with self.h.client.request(
            method, path, json=body if body else None, headers=headers
        ) as response:
            answer = await response.json(content_type=None)
            assert response.status == status, (method, path, response.status, answer)
            return answer

    async def place(self, customer_id: str, total_cents: int) -> dict[str, Any]:
        placed: dict[str, Any] = await self.call(
            "POST", "/v1/orders", 201, customer_id=customer_id, total_cents=total_cents
        )
        return placed

    async def pay(self, order_id: str) -> dict[str, Any]:
        paid: dict[str, Any] = await self.call("POST", f"/v1/orders/{order_id}/payment", 200)
        return paid

    async def order(self, order_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.call("GET", f"/v1/orders/{order_id}", 200)
        return found

    async def totals(self, customer_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.call("GET", f"/v1/customers/{customer_id}/totals", 200)
        return found

    async def count(self, sql: str, *params: Any) -> int:
        """A count in the app's own tables."""
        row = await self.h.store.fetchone(sql, params)
        return int(row[0]) if row and row[0] is not None else 0
