"""A running deployment of sluice with the orders app, and a client of its API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from sluice.app import Store
from sluice.app.testing import Child
from sluice.config import Config

APPS = "default,sluice_orders"
# Light for a test: a small code pool, orders closed two seconds after they are placed.
ENV = {"SLUICE_CODE_POOL_TARGET": "100", "ORDERS_CLOSE_AFTER_SECONDS": "2"}
GROUPS = ("loyalty", "customer-totals", "orders-jobs")


@dataclass
class Shop:
    config: Config
    url: str
    http: aiohttp.ClientSession
    spawn: Callable[..., Child]
    store: Store

    def start(self, *command: str, **env: str) -> Child:
        """``sluice *command`` of this deployment, a real process."""
        return self.spawn(self.config, *command, **{**ENV, **env})

    async def call(self, method: str, path: str, status: int, **body: Any) -> Any:
        async with self.http.request(
            method, f"{self.url}{path}", json=body if body else None
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
        row = await self.store.fetchone(sql, params)
        return int(row[0]) if row and row[0] is not None else 0
