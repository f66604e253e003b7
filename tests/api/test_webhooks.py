"""The webhooks API: the secret shown once, listing without secrets, owner-only access."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from sluice.config import Config
from tests.api.helpers import Client, problem, user_token

# SQLite only: the routes' validation and ownership; delivery runs on both stores in
# tests/integration/test_webhooks.py.
pytestmark = pytest.mark.stores("sqlite")


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(webhooks_per_user=3)


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


@pytest.fixture
async def bob(client: Client) -> dict[str, str]:
    return await user_token(client, email="bob@example.org")


async def create(client: Client, auth: dict[str, str], **fields: Any) -> dict[str, Any]:
    body = {"url": "https://hooks.example.org/sluice", "events": ["link.created"]} | fields
    response = await client.post("/v1/webhooks", json=body, headers=auth)
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    return created


async def test_created_with_a_secret_shown_once(client: Client, ada: dict[str, str]) -> None:
    created = await create(client, ada, events=["link.visited", "link.created"])
    secret = created["secret"]
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) >= 24
    assert created["events"] == ["link.visited", "link.created"]
    listed = await (await client.get("/v1/webhooks", headers=ada)).json()
    assert listed["items"] == [{k: v for k, v in created.items() if k != "secret"}]
    assert secret not in str(listed)
    given = "whsec_" + base64.b64encode(b"k" * 32).decode()
    assert (await create(client, ada, secret=given))["secret"] == given


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"url": "ftp://example.org/x"}, "url"),
        ({"url": "http://127.0.0.1:9000/x"}, "url"),
        ({"url": "http://[::ffff:10.0.0.1]/x"}, "url"),
        ({"url": "http://169.254.169.254/latest"}, "url"),
        ({"url": "http://2130706433/x"}, "url"),
        ({"url": "https://localhost/x"}, "url"),
        ({"events": []}, "events"),
        ({"events": ["link.deleted"]}, "events"),
        ({"secret": "not-a-secret"}, "secret"),
        ({"secret": "whsec_" + base64.b64encode(b"short").decode()}, "secret"),
    ],
)
async def test_invalid_webhooks_are_422(
    client: Client, ada: dict[str, str], fields: dict[str, Any], field: str
) -> None:
    body = {"url": "https://hooks.example.org/x", "events": ["link.created"]} | fields
    answer = await problem(await client.post("/v1/webhooks", json=body, headers=ada), 422)
    assert [e["field"] for e in answer["errors"]] == [field]
    assert (await (await client.get("/v1/webhooks", headers=ada)).json())["items"] == []


async def test_the_limit_per_user(client: Client, ada: dict[str, str]) -> None:
    for _ in range(3):
        await create(client, ada)
    body = {"url": "https://hooks.example.org/x", "events": ["link.created"]}
    answer = await problem(await client.post("/v1/webhooks", json=body, headers=ada), 422)
    assert answer["errors"][0]["field"] == "webhooks"


async def test_owner_only(client: Client, ada: dict[str, str], bob: dict[str, str]) -> None:
    hook = await create(client, ada)
    assert (await (await client.get("/v1/webhooks", headers=bob)).json())["items"] == []
    await problem(await client.delete(f"/v1/webhooks/{hook['id']}", headers=bob), 404)
    await problem(await client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=bob), 404)
    deliveries = await client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=ada)
    assert (await deliveries.json())["items"] == []
    assert (await client.delete(f"/v1/webhooks/{hook['id']}", headers=ada)).status == 204
    await problem(await client.delete(f"/v1/webhooks/{hook['id']}", headers=ada), 404)
    assert (await (await client.get("/v1/webhooks", headers=ada)).json())["items"] == []


async def test_tokens_and_bodies(client: Client, ada: dict[str, str]) -> None:
    await problem(await client.get("/v1/webhooks"), 401)
    await problem(await client.post("/v1/webhooks", json={"url": "https://a.example"}), 401)
    await problem(
        await client.post(
            "/v1/webhooks", data=b"{", headers=ada | {"Content-Type": "application/json"}
        ),
        400,
    )
    await problem(
        await client.post("/v1/webhooks", json={"events": "link.created"}, headers=ada), 400
    )
    hook = await create(client, ada)
    path = f"/v1/webhooks/{hook['id']}/deliveries?limit=0"
    await problem(await client.get(path, headers=ada), 422)
