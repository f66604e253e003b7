"""Bad input gets its 4xx as problem+json, never a 5xx, and nothing is written."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest

from sluice.app.assembly import create_app
from sluice.builtin.accounts.stored import insert_token, insert_user
from sluice.config import Config
from sluice.events import utcnow, uuid7
from sluice.http import MAX_BODY
from sluice.store import Store
from sluice.store.users import User
from tests.api.helpers import Client, problem

# SQLite only: bodies refused before any SQL; the routes' own tests cover each store.
pytestmark = pytest.mark.stores("sqlite")

ADMIN_TOKEN = "deep-nesting-admin-token-0123456789abcdef"

VIEWS = "/v1/articles/a1/views"
JSON = {"Content-Type": "application/json"}


@pytest.fixture(autouse=True)
async def nothing_written(store: Store) -> AsyncIterator[None]:
    yield
    assert await store.events_after(0, 10) == []


async def test_malformed_json_is_400(client: Client) -> None:
    body = await problem(await client.post(VIEWS, data=b'{"viewer": ', headers=JSON), 400)
    assert body["detail"] == "malformed JSON"
    assert "errors" not in body


async def test_wrong_type_is_400_with_the_field(client: Client) -> None:
    body = await problem(await client.post(VIEWS, json={"viewer": 5}), 400)
    [error] = body["errors"]
    assert error["field"] == "viewer"
    assert "str" in error["message"]


async def test_a_body_that_is_not_an_object_is_400(client: Client) -> None:
    body = await problem(await client.post(VIEWS, json=["alice"]), 400)
    assert body["errors"][0]["field"] == "body"


@pytest.mark.parametrize("viewer", ["", "v" * 257])
async def test_viewer_length_is_422(client: Client, viewer: str) -> None:
    body = await problem(await client.post(VIEWS, json={"viewer": viewer}), 422)
    assert [e["field"] for e in body["errors"]] == ["viewer"]


@pytest.mark.parametrize("article_id", ["a" * 65, "a.b", "a%20b", "%C3%A9t%C3%A9"])
async def test_invalid_article_id_is_422(client: Client, article_id: str) -> None:
    for response in (
        await client.post(f"/v1/articles/{article_id}/views", json={"viewer": "v"}),
        await client.get(f"/v1/articles/{article_id}"),
    ):
        body = await problem(response, 422)
        assert [e["field"] for e in body["errors"]] == ["article_id"]
        assert body["type"] != "about:blank"


async def test_the_article_id_top_is_reserved_for_the_leaderboard(client: Client) -> None:
    # GET /v1/articles/top is the leaderboard, so views of an article "top" could never
    # be read back: refused instead of counted.
    body = await problem(await client.post("/v1/articles/top/views", json={"viewer": "v"}), 422)
    assert body["errors"] == [
        {"field": "article_id", "message": "'top' is reserved for the leaderboard"}
    ]
    assert (await client.get("/v1/articles/Top")).status == 200  # ids are case-sensitive


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (VIEWS, {"viewer": "v", "veiwer": "typo"}),
        ("/v1/users", {"email": "ada@example.org", "password": "long enough", "admin": True}),
    ],
)
async def test_an_unknown_field_is_400_on_every_body(
    client: Client, path: str, body: dict[str, object]
) -> None:
    # As on links and reminders: a misspelt field is an error, not silently ignored.
    [extra] = [key for key in body if key not in ("viewer", "email", "password")]
    problem_body = await problem(await client.post(path, json=body), 400)
    assert extra in problem_body["detail"] + str(problem_body.get("errors"))


async def test_longest_valid_article_id_is_accepted(client: Client, store: Store) -> None:
    response = await client.get(f"/v1/articles/{'a' * 64}")
    assert response.status == 200


async def test_declared_oversized_body_is_413(client: Client) -> None:
    payload = b'{"viewer": "' + b"v" * MAX_BODY + b'"}'
    await problem(await client.post(VIEWS, data=payload, headers=JSON), 413)


async def test_streamed_oversized_body_is_413(client: Client) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"viewer": "'
        for _ in range(20):
            yield b"v" * 4096
        yield b'"}'

    await problem(await client.post(VIEWS, data=chunks(), headers=JSON), 413)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_not_in_its_content_encoding_is_400(client: Client, encoding: str) -> None:
    headers = {**JSON, "Content-Encoding": encoding}
    body = await problem(await client.post(VIEWS, data=b'{"viewer": "v"}', headers=headers), 400)
    assert body["detail"].startswith("the request body cannot be read")


async def test_a_body_of_exactly_the_limit_is_read(client: Client) -> None:
    payload = b'{"viewer": "' + b"v" * (MAX_BODY - 14) + b'"}'
    assert len(payload) == MAX_BODY
    # Past the size check: the viewer is too long, which is a 422, not a 413.
    await problem(await client.post(VIEWS, data=payload, headers=JSON), 422)


async def test_text_plain_body_is_415(client: Client) -> None:
    headers = {"Content-Type": "text/plain"}
    await problem(await client.post(VIEWS, data=b'{"viewer": "v"}', headers=headers), 415)


async def test_non_utf8_charset_is_415(client: Client) -> None:
    headers = {"Content-Type": "application/json; charset=latin-1"}
    await problem(await client.post(VIEWS, data=b'{"viewer": "v"}', headers=headers), 415)


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json; charset=utf-8",
        "application/json; charset=UTF-8",
        "application/merge-patch+json",
    ],
)
async def test_json_content_types_are_accepted(
    client: Client, store: Store, content_type: str
) -> None:
    # A wrong type proves the body was decoded: 400 instead of 415.
    response = await client.post(
        VIEWS, data=b'{"viewer": 1}', headers={"Content-Type": content_type}
    )
    await problem(response, 400)


async def test_unknown_route_is_404_problem(client: Client) -> None:
    body = await problem(await client.get("/no/such/route"), 404)
    assert "/no/such/route" in body["detail"]


async def test_wrong_method_is_405_problem_with_allow(client: Client) -> None:
    response = await client.delete("/healthz")
    await problem(response, 405)
    assert "GET" in response.headers["Allow"]


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ("period=year", ["period"]),
        ("limit=0", ["limit"]),
        ("limit=101", ["limit"]),
        ("limit=ten", ["limit"]),
        ("limit=-1", ["limit"]),
        ("limit=" + "9" * 5000, ["limit"]),
        ("period=hour&limit=1000", ["period", "limit"]),
    ],
)
async def test_bad_top_query_is_422(client: Client, query: str, fields: list[str]) -> None:
    body = await problem(await client.get(f"/v1/articles/top?{query}"), 422)
    assert [e["field"] for e in body["errors"]] == fields


def nested(depth: int) -> bytes:
    """A body whose field (ignored on a login) holds arrays ``depth`` deep."""
    return b'{"email": "a@example.org", "password": "long enough", "x": ' + (
        b"[" * depth + b"]" * depth + b"}"
    )


async def test_a_login_with_an_ignored_field_nested_deep_is_400_not_500(client: Client) -> None:
    """The finding: msgspec's RecursionError escaped read_json as a 500 (guarantee 7)."""
    body = await problem(await client.post("/v1/tokens", data=nested(1000), headers=JSON), 400)
    assert body["detail"] == "the JSON is nested too deeply"


async def test_deep_nesting_is_400_on_every_json_route(
    client: Client,
    store: Store,
    make_config: Callable[..., Config],
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    # A user without events (nothing_written), so routes behind a token read their body
    # too; the admin routes get an app with an admin token, and that token.
    admin = await aiohttp_client(create_app(make_config(admin_token=ADMIN_TOKEN)))
    admin_headers = {**JSON, "Authorization": f"Bearer {ADMIN_TOKEN}"}
    now = utcnow()
    user = User(id=uuid7(), email="deep@example.org", name=None, created_at=now)
    async with store.transaction() as tx:
        await insert_user(tx, user, "not-a-hash")
    await insert_token(store, "deep-token", user.id, now, now + timedelta(hours=1))
    headers = {**JSON, "Authorization": "Bearer deep-token"}
    document = await (await client.get("/openapi.json")).json()
    routes = [
        (method, path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    ]
    assert len(routes) >= 6
    for method, path in routes:
        url = re.sub(r"\{[^}]+\}", "x", path)
        caller, auth = (
            (admin, admin_headers) if path.startswith("/v1/admin/") else (client, headers)
        )
        for depth in (1000, 20_000):
            response = await caller.request(method, url, data=nested(depth), headers=auth)
            await problem(response, 400)
