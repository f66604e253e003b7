from __future__ import annotations

import sqlite3

import pytest

from sluice.embedded.redis_server import RedisServer
from sluice.http.app_keys import STORE
from tests.api.helpers import Client, problem


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


async def test_readyz_names_the_database_when_it_fails(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.app is not None

    async def disk_failing() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(client.app[STORE], "ping", disk_failing)
    body = await problem(await client.get("/readyz"), 503)
    assert body["detail"] == "database is not answering"
    assert body["checks"] == {"database": "unavailable", "redis": "ok"}
