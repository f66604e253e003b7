"""An API client on a real app: this test's SQLite file and its own redis-server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from sluice.config import Config
from sluice.events import Event, decode
from sluice.http import create_app
from sluice.http.keys import STORE
from sluice.store import Store

Client = TestClient[web.Request, web.Application]
AiohttpClient = Callable[..., Awaitable[Client]]


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, config: Config) -> Client:
    return await aiohttp_client(create_app(config))


@pytest.fixture
def store(client: Client) -> Store:
    """The app's own store (same SQLite file), to look at what a request wrote."""
    assert client.app is not None
    return client.app[STORE]


async def stored_events(store: Store) -> list[tuple[Event, str]]:
    """Every event in the history, decoded, with the trace id of its row."""
    return [(decode(row.payload), row.trace_id) for row in await store.events_after(0, 1000)]


async def problem(response: Any, status: int) -> dict[str, Any]:
    """Assert a problem+json answer with ``status`` and return its body."""
    assert response.status == status, await response.text()
    assert response.content_type == "application/problem+json"
    body: dict[str, Any] = await response.json(content_type="application/problem+json")
    assert body["status"] == status
    assert body["title"] and body["detail"] and body["type"]
    return body
