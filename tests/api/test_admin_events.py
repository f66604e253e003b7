"""``GET /v1/admin/events``: the search over HTTP, its pages and cursor, every error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sluice.app.assembly import create_app
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.http.app_keys import STORE
from tests.api.helpers import AiohttpClient, Client, problem
from tests.engine_app import APPS, Pinged
from tests.link_helpers import OWNER_TOKEN, add_user

TOKEN = "events-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, make_config: Callable[..., Config]) -> Client:
    return await aiohttp_client(create_app(make_config(admin_token=TOKEN)))


async def page(admin: Client, **query: str) -> dict[str, Any]:
    response = await admin.get("/v1/admin/events", params=query, headers=ADMIN)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


@pytest.mark.apps(APPS)  # the engine's test app (tests/engine_app)
async def test_a_registration_is_found_by_its_trace_id_and_the_pages_cover_everything(
    admin: Client,
) -> None:
    response = await admin.post(
        "/v1/users", json={"email": "ada@example.com", "password": "correct horse battery"}
    )
    assert response.status == 201, await response.text()
    trace = response.headers["X-Trace-Id"]
    assert admin.app is not None
    async with admin.app[STORE].transaction() as tx:
        await tx.append(*(Pinged(source="a1", note=f"v{i}") for i in range(5)))
        await tx.append(*(LinkVisited(code="c1", visitor=f"x{i}") for i in range(3)))

    found = await page(admin, trace_id=trace)
    assert [e["type"] for e in found["items"]] == ["UserRegistered"]
    [registered] = found["items"]
    assert registered["data"]["email"] == "ada@example.com"
    assert registered["aggregate"] == "users" and registered["trace_id"] == trace
    assert found["next_cursor"] is None and found["hot_since"] == registered["created_at"]

    seen: list[int] = []
    query = {"limit": "3"}
    while True:
        body = await page(admin, **query)
        seen += [e["seq"] for e in body["items"]]
        if body["next_cursor"] is None:
            break
        query = {"limit": "3", "cursor": body["next_cursor"]}
    assert len(seen) == 9 and seen == sorted(seen, reverse=True)  # one page after another

    pings = await page(admin, type="Pinged", limit="500")
    assert len(pings["items"]) == 5 and {e["data"]["source"] for e in pings["items"]} == {"a1"}
    visits = await page(admin, aggregate="visits")
    assert [e["type"] for e in visits["items"]] == ["LinkVisited"] * 3
    assert (await page(admin, since="2000-01-01T00:00:00Z", until="2000-01-02T00:00:00Z"))[
        "items"
    ] == []


@pytest.mark.parametrize(
    "query, field",
    [
        ({"type": "Nope"}, "type"),
        ({"aggregate": "nope"}, "aggregate"),
        ({"trace_id": "not a trace"}, "trace_id"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-12-01T10:00:00"}, "until"),  # no offset
        ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"cursor": "garbage!"}, "cursor"),
    ],
)
async def test_bad_parameters_are_422_naming_the_field(
    admin: Client, query: dict[str, str], field: str
) -> None:
    body = await problem(await admin.get("/v1/admin/events", params=query, headers=ADMIN), 422)
    assert [e["field"] for e in body["errors"]] == [field]


async def test_the_admin_token_is_required(admin: Client) -> None:
    assert admin.app is not None
    await add_user(admin.app[STORE])
    await problem(await admin.get("/v1/admin/events"), 401)
    user = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    await problem(await admin.get("/v1/admin/events", headers=user), 403)
