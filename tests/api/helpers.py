"""Helpers for the API tests: the client types, the stored history, problem answers, a
registered user and its token. Plain code, imported by the tests; ``tests/api/conftest.py``
keeps only fixtures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from sluice.events import Event, decode
from sluice.store import Store

Client = TestClient[web.Request, web.Application]
AiohttpClient = Callable[..., Awaitable[Client]]


async def stored_events(store: Store) -> list[tuple[Event, str]]:
    """Every event in the history, decoded, with the trace id of its row."""
    return [(decode(row.payload), row.trace_id) for row in await store.events_after(0, 1000)]


async def problem(response: Any, status: int) -> dict[str, Any]:
    """Assert a problem+json answer with ``status`` and return its body."""
    assert response.status == status, await response.text()
    assert response.content_type == "application/problem+json"
    assert response.headers.get("X-Content-Type-Options") == "nosniff"  # never sniffed
    body: dict[str, Any] = await response.json(content_type="application/problem+json")
    assert body["status"] == status
    assert body["title"] and body["detail"] and body["type"]
    return body


PASSWORD = "correct horse battery"


async def register(client: Client, email: str = "Ada@Example.org", **extra: Any) -> Any:
    response = await client.post("/v1/users", json={"email": email, "password": PASSWORD, **extra})
    assert response.status == 201, await response.text()
    return await response.json()


async def login(client: Client, email: str = "ada@example.org", password: str = PASSWORD) -> Any:
    return await client.post("/v1/tokens", json={"email": email, "password": password})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def user_token(client: Client, email: str = "ada@example.org") -> dict[str, str]:
    await register(client, email=email)
    response = await login(client, email=email)
    assert response.status == 201
    return bearer((await response.json())["token"])


ADMIN = {"Authorization": "Bearer dlq-admin-token-0123456789abcdef"}


async def listed(client: Client, **query: str) -> list[dict[str, Any]]:
    response = await client.get("/v1/admin/dead-letters", params=query, headers=ADMIN)
    assert response.status == 200, await response.text()
    body: list[dict[str, Any]] = await response.json()
    return body


class LoopLag:
    """The worst delay of a 1 ms sleep while the block runs: how long the loop was held."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            self.worst = max(self.worst, time.perf_counter() - started - 0.001)

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        await asyncio.sleep(0.01)  # a wake-up already due is measured, not cancelled
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
