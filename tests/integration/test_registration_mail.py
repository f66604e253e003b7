"""A registration through the API gets its welcome mail once, even with Redis down."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay

pytestmark = pytest.mark.topologies("single", "cluster")


@pytest.mark.topologies("single", "partitioned")  # stops or pauses the one Redis server
async def test_registration_answers_201_with_redis_down_and_the_mail_follows(
    config: Config,
    resources: Resources,
    redis_server: RedisServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
) -> None:
    client = await aiohttp_client(create_app(config))
    start_relay()
    start_worker("mail", name="m1")
    mail_dir = Path(config.data_dir) / "mail"

    redis_server.stop()
    response = await client.post(
        "/v1/users", json={"email": "grace@example.org", "password": "hopper-1906", "name": "Grace"}
    )
    assert response.status == 201
    user = await response.json()
    assert not mail_dir.exists() or not any(mail_dir.glob("*.eml"))
    redis_server.start()

    async def one_mail() -> bool:
        return mail_dir.exists() and len(list(mail_dir.glob("*.eml"))) == 1

    await wait_for(one_mail)
    [mail] = mail_dir.glob("*.eml")
    assert mail.name == f"welcome_{user['id']}.eml"
    text = mail.read_text()
    assert "grace@example.org" in text
    assert "hopper-1906" not in text
