"""Views posted through the API while Redis is down: 202s, counted once it is back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay


async def test_views_posted_while_redis_is_down_are_counted_when_it_returns(
    config: Config,
    resources: Resources,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
) -> None:
    client = await aiohttp_client(create_app(config))
    start_relay()
    start_worker()
    for viewer in ("a", "b"):
        response = await client.post("/v1/articles/outage/views", json={"viewer": viewer})
        assert response.status == 202

    redis_server.stop()
    statuses = []
    for viewer in ("c", "d", "e"):
        response = await client.post("/v1/articles/outage/views", json={"viewer": viewer})
        statuses.append((response.status, await response.json()))
    assert statuses == [(202, {"counted": True})] * 3
    redis_server.start()

    async def all_five() -> bool:
        response = await client.get("/v1/articles/outage")
        return (await response.json())["views"] == 5

    await wait_for(all_five)
    repeat = await client.post("/v1/articles/outage/views", json={"viewer": "a"})
    assert await repeat.json() == {"counted": False}  # the window survived the restart (AOF)
