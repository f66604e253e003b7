"""The link fields of docs/guides/links.md (issue 18): max_visits, valid_since, redirect_status,
tags and title. Their rules (422 naming each field), what the redirect answers by them, and the
listing's tag filter."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sluice.app.testing import patience, wait_for
from sluice.builtin.links.events import LinkCreated, LinkUpdated
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow
from sluice.http.app_keys import REDIS
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events, user_token
from tests.api.link_helpers import committed, create, patch

FIELDS = {
    "max_visits": 5,
    "valid_since": "2020-01-01T01:00:00+01:00",
    "redirect_status": 308,
    "tags": ["news", "q3-2026", "news"],
    "title": "Ünïcode title",
}


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


async def get(client: Client, code: str) -> int:
    return (await client.get(f"/{code}", allow_redirects=False)).status


async def head(client: Client, code: str) -> int:
    return (await client.head(f"/{code}", allow_redirects=False)).status


async def test_the_fields_are_stored_answered_everywhere_and_carried_by_the_events(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    link = await create(client, ada, **FIELDS)
    expected = {
        "max_visits": 5,
        "valid_since": "2020-01-01T00:00:00Z",
        "redirect_status": 308,
        "tags": ["news", "q3-2026"],
        "title": "Ünïcode title",
    }
    assert {k: link[k] for k in expected} == expected
    read = await (await client.get(f"/v1/links/{link['code']}", headers=ada)).json()
    [listed] = (await (await client.get("/v1/links", headers=ada)).json())["items"]
    assert read == listed == link
    plain = await create(client, ada)
    assert (plain["max_visits"], plain["valid_since"], plain["redirect_status"]) == (
        None,
        None,
        302,
    )
    assert (plain["tags"], plain["title"]) == ([], None)

    changed = await patch(
        client,
        ada,
        link["code"],
        max_visits=None,
        valid_since=None,
        tags=None,
        title=None,
        redirect_status=301,
    )
    assert {k: changed[k] for k in expected} == {
        "max_visits": None,
        "valid_since": None,
        "redirect_status": 301,
        "tags": [],
        "title": None,
    }
    kept = await patch(client, ada, link["code"], title="again")
    assert (kept["redirect_status"], kept["title"]) == (301, "again")

    events = [e for e, _ in await stored_events(store) if isinstance(e, LinkCreated | LinkUpdated)]
    first = events[0]
    assert isinstance(first, LinkCreated)
    assert (first.max_visits, first.redirect_status, first.tags) == (5, 308, ("news", "q3-2026"))
    assert first.valid_since is not None and first.title == "Ünïcode title"
    last = events[-1]
    assert isinstance(last, LinkUpdated)
    assert (last.max_visits, last.redirect_status, last.title) == (None, 301, "again")


BAD = {
    "max_visits": 0,
    "valid_since": "2030-01-01T00:00:00",  # no offset
    "redirect_status": 303,
    "tags": ["ok", "Not-Lower"],
    "title": "x" * 201,
}


async def test_every_invalid_field_is_named_in_one_422_on_create_and_patch(
    client: Client, ada: dict[str, str]
) -> None:
    response = await client.post(
        "/v1/links", json={"url": "https://example.org/", **BAD}, headers=ada
    )
    body = await problem(response, 422)
    assert {e["field"] for e in body["errors"]} == set(BAD)
    link = await create(client, ada)
    response = await client.patch(f"/v1/links/{link['code']}", json=BAD, headers=ada)
    body = await problem(response, 422)
    assert {e["field"] for e in body["errors"]} == set(BAD)
    # Nothing was changed.
    again = await (await client.get(f"/v1/links/{link['code']}", headers=ada)).json()
    assert again == link


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_visits", -3),
        ("valid_since", "next tuesday"),
        ("redirect_status", 200),
        ("tags", [f"t{i}" for i in range(11)]),
        ("tags", ["a" * 33]),
        ("tags", [""]),
        ("tags", ["has space"]),
        ("title", "é" * 201),
    ],
)
async def test_one_invalid_field_is_a_422_naming_it(
    client: Client, ada: dict[str, str], field: str, value: object
) -> None:
    response = await client.post(
        "/v1/links", json={"url": "https://example.org/", field: value}, headers=ada
    )
    body = await problem(response, 422)
    assert [e["field"] for e in body["errors"]] == [field]


async def test_limits_that_hold_are_accepted(client: Client, ada: dict[str, str]) -> None:
    link = await create(
        client,
        ada,
        max_visits=1,
        title="é" * 200,
        tags=[f"t{i}" for i in range(10)] + ["t0", "t1"],
        valid_since="2999-12-31T23:59:59-14:00",
    )
    assert (link["max_visits"], len(link["title"]), len(link["tags"])) == (1, 200, 10)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_visits", "5"),
        ("max_visits", 2.5),
        ("redirect_status", "301"),
        ("tags", "news"),
        ("title", 7),
        ("redirect_status", None),
    ],
)
async def test_a_field_of_the_wrong_type_is_a_400(
    client: Client, ada: dict[str, str], field: str, value: object
) -> None:
    link = await create(client, ada)
    response = await client.patch(f"/v1/links/{link['code']}", json={field: value}, headers=ada)
    await problem(response, 400)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_the_redirect_answers_with_the_links_status(
    client: Client, ada: dict[str, str], status: int
) -> None:
    link = await create(client, ada, url="https://example.org/s", redirect_status=status)
    for method in (client.get, client.head):
        response = await method(f"/{link['code']}", allow_redirects=False)
        assert response.status == status
        assert response.headers["Location"] == "https://example.org/s"


async def test_a_changed_status_is_answered_at_once(client: Client, ada: dict[str, str]) -> None:
    link = await create(client, ada)
    assert await get(client, link["code"]) == 302  # cached now
    await patch(client, ada, link["code"], redirect_status=307)
    assert await get(client, link["code"]) == 307


async def test_before_valid_since_the_code_is_unknown(client: Client, ada: dict[str, str]) -> None:
    soon = utcnow() + timedelta(seconds=patience(1.5))  # still ahead at the GETs below
    link = await create(client, ada, valid_since=soon.isoformat())
    for method in (client.get, client.head):
        response = await method(f"/{link['code']}", allow_redirects=False)
        unknown = await method("/nosuchcode", allow_redirects=False)
        assert response.status == unknown.status == 404
        if method is client.get:
            assert (await response.json(content_type=None))["detail"].startswith("no short link")

    # The cached link becomes valid on time, with no change to tell the cache.
    async def redirects() -> bool:
        return await get(client, link["code"]) == 302

    await wait_for(redirects, timeout=5)
    ancient = await create(client, ada, valid_since="0336-05-25T21:08:26+02:00")
    assert ancient["valid_since"] == "0336-05-25T19:08:26Z"
    assert await get(client, ancient["code"]) == 302
    read = await client.get(f"/v1/links/{ancient['code']}", headers=ada)
    assert (await read.json())["valid_since"] == "0336-05-25T19:08:26Z"
    later = await create(client, ada, valid_since="2999-01-01T00:00:00Z")
    assert await get(client, later["code"]) == 404
    await patch(client, ada, later["code"], valid_since="2000-01-01T00:00:00Z")
    assert await get(client, later["code"]) == 302


async def test_max_visits_then_410_and_head_never_counts(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    link = await create(client, ada, max_visits=3)
    code = link["code"]
    assert [await head(client, code) for _ in range(5)] == [302] * 5
    assert [await get(client, code) for _ in range(5)] == [302, 302, 302, 410, 410]
    assert await head(client, code) == 410
    response = await client.get(f"/{code}", allow_redirects=False)
    assert "visits" in (await problem(response, 410))["detail"]
    # A higher limit applies at once; the refused GETs did not count.
    await patch(client, ada, code, max_visits=5)
    assert [await get(client, code) for _ in range(3)] == [302, 302, 410]
    await patch(client, ada, code, max_visits=None)
    assert [await get(client, code) for _ in range(2)] == [302, 302]
    # Only the served redirects were recorded as visits.
    await committed(client)
    visited = [e for e, _ in await stored_events(store) if type(e).__name__ == "LinkVisited"]
    assert len(visited) == 7


async def test_a_lost_counter_starts_again_from_the_database(
    client: Client, ada: dict[str, str]
) -> None:
    link = await create(client, ada, max_visits=3)
    code = link["code"]
    assert [await get(client, code) for _ in range(2)] == [302, 302]
    await committed(client)
    assert client.app is not None
    await client.app[REDIS].flushall()  # as if Redis had lost its data
    assert [await get(client, code) for _ in range(3)] == [302, 410, 410]


async def test_a_limited_link_is_503_while_redis_is_down_and_others_redirect(
    client: Client, ada: dict[str, str], redis_server: RedisServer
) -> None:
    limited = await create(client, ada, max_visits=10)
    plain = await create(client, ada)
    assert await get(client, limited["code"]) == 302
    assert await get(client, plain["code"]) == 302
    redis_server.stop()
    await problem(await client.get(f"/{limited['code']}", allow_redirects=False), 503)
    assert await head(client, limited["code"]) == 503
    assert await get(client, plain["code"]) == 302
    # Setting a limit needs the counter: 503, nothing changed.
    response = await client.patch(f"/v1/links/{plain['code']}", json={"max_visits": 3}, headers=ada)
    await problem(response, 503)
    assert await get(client, plain["code"]) == 302


async def test_the_tag_filter_lists_the_callers_links_with_that_tag(
    client: Client, ada: dict[str, str]
) -> None:
    bob = await user_token(client, "bob@example.org")
    first = await create(client, ada, tags=["news", "a"])
    await create(client, ada, tags=["other"])
    third = await create(client, ada, tags=["news"])
    await create(client, bob, tags=["news"])

    async def listed(query: str, auth: dict[str, str] = ada) -> dict[str, Any]:
        response = await client.get(f"/v1/links?{query}", headers=auth)
        assert response.status == 200, await response.text()
        page: dict[str, Any] = await response.json()
        return page

    page = await listed("tag=news")
    assert [item["code"] for item in page["items"]] == [third["code"], first["code"]]
    one = await listed("tag=news&limit=1")
    assert [item["code"] for item in one["items"]] == [third["code"]]
    two = await listed(f"tag=news&limit=1&cursor={one['next_cursor']}")
    assert [item["code"] for item in two["items"]] == [first["code"]]
    assert two["next_cursor"] is None
    assert (await listed("tag=nothing"))["items"] == []
    # Tags changed by PATCH change what the filter finds.
    await patch(client, ada, first["code"], tags=["a"])
    assert [item["code"] for item in (await listed("tag=news"))["items"]] == [third["code"]]
    await patch(client, ada, first["code"], tags=["a", "news"])
    assert len((await listed("tag=news"))["items"]) == 2
    await patch(client, ada, third["code"], tags=None)
    assert [item["code"] for item in (await listed("tag=news"))["items"]] == [first["code"]]
    for bad in ("News", "", "a" * 33, "x y"):
        response = await client.get("/v1/links", params={"tag": bad}, headers=ada)
        assert [e["field"] for e in (await problem(response, 422))["errors"]] == ["tag"]
