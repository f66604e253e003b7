from __future__ import annotations

from sluice.redis_server import RedisServer
from tests.api.conftest import Client, problem


async def test_healthz(client: Client) -> None:
    response = await client.get("/healthz")
    assert response.status == 200
    assert await response.json() == {"status": "ok"}


async def test_readyz_ok(client: Client) -> None:
    response = await client.get("/readyz")
    assert response.status == 200
    assert await response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "redis": "ok"},
    }


async def test_readyz_names_redis_when_it_is_down(
    client: Client, redis_server: RedisServer
) -> None:
    redis_server.stop()
    body = await problem(await client.get("/readyz"), 503)
    assert "redis" in body["detail"]
    assert "database" not in body["detail"]
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"] != "ok"


async def test_healthz_answers_while_redis_is_down(
    client: Client, redis_server: RedisServer
) -> None:
    redis_server.stop()
    response = await client.get("/healthz")
    assert response.status == 200
