"""The links API: creation rules, owner-only access, pages, PATCH semantics, events, codes."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.app.assembly import create_app
from sluice.builtin.links import repository
from sluice.builtin.links.events import LinkCreated, LinkUpdated
from sluice.builtin.links.http.links import POOL_REFILLER
from sluice.builtin.links.pool import free_codes, refill
from sluice.builtin.links.settings import LinksSettings
from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.http.app_keys import CONFIG as CONFIG_KEY
from sluice.http.app_keys import STORE as STORE_KEY
from sluice.store import Store
from tests.api.helpers import (
    AiohttpClient,
    Client,
    bearer,
    problem,
    user_token,
)
from tests.api.link_helpers import create, link_events

CODE = re.compile(r"[0-9A-Za-z]{6}")
FUTURE = "2999-01-01T00:00:00Z"


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    # A small pool: the first link finds it empty, later ones take pooled codes.
    return make_config(code_pool_target=150)


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


async def test_a_link_gets_a_random_code_and_its_event(
    client: Client, store: Store, ada: dict[str, str], config: Config
) -> None:
    response = await client.post(
        "/v1/links", json={"url": "https://example.org/a?b=1#c"}, headers=ada
    )
    assert response.status == 201
    link = await response.json()
    assert set(link) == {
        "code",
        "short_url",
        "url",
        "expires_at",
        "disabled",
        "created_at",
        "max_visits",
        "valid_since",
        "redirect_status",
        "tags",
        "title",
        "rules",
        "has_password",
    }
    assert link["rules"] == []
    assert CODE.fullmatch(link["code"])
    assert link["short_url"] == f"{config.base_url}/{link['code']}"
    assert response.headers["Location"] == f"/v1/links/{link['code']}"
    assert (link["url"], link["expires_at"], link["disabled"]) == (
        "https://example.org/a?b=1#c",
        None,
        False,
    )
    assert link["created_at"].endswith("Z")
    [(event, trace_id)] = await link_events(store)
    assert isinstance(event, LinkCreated)
    me = (await (await client.get("/v1/me", headers=ada)).json())["id"]
    assert (event.code, event.owner_id, event.url, event.expires_at, event.disabled) == (
        link["code"],
        me,
        link["url"],
        None,
        False,
    )
    assert event.trace_id == trace_id == response.headers["X-Trace-Id"]
    assert await (await client.get(f"/v1/links/{link['code']}", headers=ada)).json() == link


async def test_aliases_are_unique_case_sensitively(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    bob = await user_token(client, "bob@example.org")
    assert (await create(client, ada, alias="My-Link_1"))["code"] == "My-Link_1"
    await problem(
        await client.post(
            "/v1/links", json={"url": "https://a.example/", "alias": "My-Link_1"}, headers=bob
        ),
        409,
    )
    assert (await create(client, bob, alias="my-link_1"))["code"] == "my-link_1"
    assert len(await link_events(store)) == 2


@pytest.mark.parametrize(
    "alias",
    [
        "api",
        "ADMIN",
        "Healthz",
        "readyz",
        "metrics",
        "static",
        "Assets",
        "login",
        "logout",
        "v1",
        "openapi.json",
        "favicon.ico",
        "robots.txt",
    ],
)
async def test_reserved_aliases_are_422_whatever_their_case(
    client: Client, store: Store, ada: dict[str, str], alias: str
) -> None:
    body = await problem(
        await client.post(
            "/v1/links", json={"url": "https://example.org/", "alias": alias}, headers=ada
        ),
        422,
    )
    assert body["errors"] == [{"field": "alias", "message": "is a reserved word"}]
    assert await link_events(store) == []


@pytest.mark.parametrize(
    "alias", ["ab", "-abc", "_abc", "a" * 65, "has space", "ünïcode", "a.b.c", "a/bc", ""]
)
async def test_malformed_aliases_are_422(
    client: Client, store: Store, ada: dict[str, str], alias: str
) -> None:
    body = await problem(
        await client.post(
            "/v1/links", json={"url": "https://example.org/", "alias": alias}, headers=ada
        ),
        422,
    )
    assert [e["field"] for e in body["errors"]] == ["alias"]
    assert await link_events(store) == []


async def test_the_longest_and_shortest_aliases_are_fine(
    client: Client, ada: dict[str, str]
) -> None:
    assert (await create(client, ada, alias="a" * 64))["code"] == "a" * 64
    assert (await create(client, ada, alias="0-_"))["code"] == "0-_"


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,<b>hi</b>",
        "file:///etc/passwd",
        "ftp://example.org/",
        "mailto:ada@example.org",
        "example.org/path",
        "//example.org/",
        "/relative",
        "http://",
        "http:///path",
        "https://user:secret@example.org/",
        "https://user@example.org/",
        "https://example.org@evil.example/",
        "https://exa mple.org/",
        "https://example.org/a\nb",
        "https://example.org:99999/",
        "https://<script>/",
        "https://a..b/",
        "https://example.org:0/",
        "https://example.org/\u0085x",
        "https://example.org/a\u2028b",
        "https://example.org/a\u00a0b",
        "https://example.org/\u202egnp.exe",
        "https://exa\u200bmple.org/",
        "https://example.org/" + "x" * 2029,  # 2049 characters
        "http://127.0.0.1:8080/abc",
        "HTTP://127.0.0.1:8080",
        "http://127.0.0.1:8080/",
        # The service's own address as browsers also read it (127.0.0.1 spelt otherwise).
        "http://127.1:8080/",
        "http://0x7f.1:8080/",
        "http://2130706433:8080/",
        "http://[::ffff:7f00:1]:8080/",
        "http://127.0.0.1.:8080/",
        # Every loopback name and address reaches a service on 127.0.0.1 (the docs'
        # examples say localhost:8080).
        "http://localhost:8080/abc",
        "http://LocalHost.:8080/",
        "http://app.localhost:8080/",
        "http://[::1]:8080/",
        "http://127.0.0.2:8080/",
        "http://0.0.0.0:8080/",
        "http://[::]:8080/",
        # A host ending in a number can only be IPv4, and these are not.
        "https://1.2.3.4.5/",
        "https://256.256.256.256/",
        "https://example.123/",
        "",
    ],
)
async def test_bad_urls_are_422_and_write_nothing(
    client: Client, store: Store, ada: dict[str, str], url: str
) -> None:
    body = await problem(await client.post("/v1/links", json={"url": url}, headers=ada), 422)
    assert [e["field"] for e in body["errors"]] == ["url"]
    assert await link_events(store) == []


async def test_url_edge_cases_that_are_accepted(client: Client, ada: dict[str, str]) -> None:
    longest = "https://example.org/" + "x" * 2028
    assert (await create(client, ada, url=longest))["url"] == longest
    # Another port on the service's host is another service.
    assert (await create(client, ada, url="http://127.0.0.1:9090/"))["url"]
    assert (await create(client, ada, url="http://localhost:9090/"))["url"]
    assert (await create(client, ada, url="https://localhost.example/"))["url"]
    # Names that resolve to loopback are not looked up (docs/design/links.md).
    assert (await create(client, ada, url="http://localtest.me:8080/"))["url"]
    for address in ("https://10.0.0.1/", "https://[2001:db8::1]/", "https://0x0a.1/"):
        assert (await create(client, ada, url=address))["url"] == address  # kept as written
    # The zero-width joiners that Persian, Indic scripts and emoji need are not hidden
    # characters (bidi overrides and zero-width spaces are).
    for joined in (
        "https://fa.example/\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
        "https://example.org/\U0001f469\u200d\U0001f4bb",
    ):
        assert (await create(client, ada, url=joined))["url"].startswith("https://")
    # An IRI is stored as the ASCII URI a Location header can carry.
    iri = await create(client, ada, url="https://bücher.example/straße?q=ä")
    assert iri["url"] == "https://xn--bcher-kva.example/stra%C3%9Fe?q=%C3%A4"


@pytest.mark.parametrize(
    ("base_url", "own", "other"),
    [
        # http:// of the https short domain is the short domain too.
        ("https://sho.rt", "http://SHO.RT/abc", "http://sho.rt:8000/abc"),
        ("https://sho.rt", "https://sho.rt.:443/abc", "https://www.sho.rt/abc"),
        ("https://Sho.rt:8443", "https://sho.rt:8443/abc", "https://sho.rt/abc"),
        ("http://localhost:8000", "http://127.0.0.1:8000/abc", "http://127.0.0.1:8001/abc"),
        ("http://[::1]:8000", "http://localhost:8000/abc", "http://[::2]:8000/abc"),
    ],
)
async def test_the_own_short_domain_is_refused(
    aiohttp_client: AiohttpClient,
    make_config: Callable[..., Config],
    base_url: str,
    own: str,
    other: str,
) -> None:
    client = await aiohttp_client(create_app(make_config(base_url=base_url, code_pool_target=0)))
    auth = await user_token(client)
    body = await problem(await client.post("/v1/links", json={"url": own}, headers=auth), 422)
    assert body["errors"] == [
        {"field": "url", "message": "must not point at this service's own short links"}
    ]
    assert (await client.post("/v1/links", json={"url": other}, headers=auth)).status == 201


async def test_missing_url_is_422_wrong_types_and_unknown_fields_400(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    body = await problem(await client.post("/v1/links", json={}, headers=ada), 422)
    assert body["errors"] == [{"field": "url", "message": "is required"}]
    await problem(await client.post("/v1/links", json={"url": 5}, headers=ada), 400)
    await problem(await client.post("/v1/links", json=["https://a.example/"], headers=ada), 400)
    await problem(
        await client.post(
            "/v1/links", json={"url": "https://a.example/", "alais": "x"}, headers=ada
        ),
        400,
    )
    await problem(
        await client.post(
            "/v1/links", data=b"{", headers={**ada, "Content-Type": "application/json"}
        ),
        400,
    )
    await problem(
        await client.post(
            "/v1/links",
            data="url=x",
            headers={**ada, "Content-Type": "application/x-www-form-urlencoded"},
        ),
        415,
    )
    await problem(
        await client.post(
            "/v1/links",
            data=b'{"url": "' + b"x" * 70_000 + b'"}',
            headers={**ada, "Content-Type": "application/json"},
        ),
        413,
    )
    assert await link_events(store) == []


async def test_every_error_of_a_body_is_reported_at_once(
    client: Client, ada: dict[str, str]
) -> None:
    body = await problem(
        await client.post(
            "/v1/links",
            headers=ada,
            json={"url": "javascript:x", "alias": "admin", "expires_at": "2000-01-01T00:00:00Z"},
        ),
        422,
    )
    assert [e["field"] for e in body["errors"]] == ["url", "alias", "expires_at"]


@pytest.mark.parametrize(
    "expires_at",
    [
        "2000-01-01T00:00:00Z",
        "2999-01-01T00:00:00",
        "2999-01-01",
        "tomorrow",
        "2999-13-01T00:00:00Z",
        "",
        "9999-12-31T23:59:59-14:00",
    ],  # valid RFC 3339, but after the last UTC time Python has
)
async def test_bad_or_past_expiry_is_422(
    client: Client, store: Store, ada: dict[str, str], expires_at: str
) -> None:
    response = await client.post(
        "/v1/links", json={"url": "https://example.org/", "expires_at": expires_at}, headers=ada
    )
    body = await problem(response, 422)
    assert [e["field"] for e in body["errors"]] == ["expires_at"]
    assert await link_events(store) == []


async def test_expiry_is_stored_and_answered_in_utc(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    link = await create(client, ada, expires_at="2999-01-01T08:00:00+08:00")
    assert link["expires_at"] == "2999-01-01T00:00:00Z"
    [(event, _)] = await link_events(store)
    assert event.expires_at == datetime(2999, 1, 1, tzinfo=UTC)
    got = await (await client.get(f"/v1/links/{link['code']}", headers=ada)).json()
    assert got["expires_at"] == "2999-01-01T00:00:00Z"


async def test_every_links_route_needs_a_user_token(client: Client, ada: dict[str, str]) -> None:
    code = (await create(client, ada))["code"]
    for method, path in [
        ("POST", "/v1/links"),
        ("GET", "/v1/links"),
        ("GET", f"/v1/links/{code}"),
        ("PATCH", f"/v1/links/{code}"),
    ]:
        response = await client.request(method, path, json={"url": "https://a.example/"})
        await problem(response, 401)
        bad = await client.request(method, path, headers=bearer("nope"), json={})
        await problem(bad, 401)


async def test_another_users_link_is_404_like_an_unknown_one(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    code = (await create(client, ada))["code"]
    bob = await user_token(client, "bob@example.org")
    mine = await problem(await client.get(f"/v1/links/{code}", headers=bob), 404)
    unknown = await problem(await client.get("/v1/links/zzzzzz", headers=bob), 404)
    assert mine["title"] == unknown["title"]
    await problem(
        await client.patch(f"/v1/links/{code}", json={"disabled": True}, headers=bob), 404
    )
    await problem(await client.patch("/v1/links/zzzzzz", json={"disabled": True}, headers=bob), 404)
    assert [type(e) for e, _ in await link_events(store)] == [LinkCreated]
    link = await (await client.get(f"/v1/links/{code}", headers=ada)).json()
    assert link["disabled"] is False
    assert await (await client.get("/v1/links", headers=bob)).json() == {
        "items": [],
        "next_cursor": None,
    }


async def test_pages_run_newest_first_and_hold_only_own_links(
    client: Client, ada: dict[str, str]
) -> None:
    bob = await user_token(client, "bob@example.org")
    created = [
        (await create(client, ada, url=f"https://example.org/{i}"))["code"] for i in range(7)
    ]
    await create(client, bob)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        response = await client.get("/v1/links", params=params, headers=ada)
        assert response.status == 200
        page = await response.json()
        seen += [item["code"] for item in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == created[::-1]
    everything = await (await client.get("/v1/links", headers=ada)).json()
    assert [i["code"] for i in everything["items"]] == created[::-1]
    assert everything["next_cursor"] is None
    exact = await (await client.get("/v1/links", params={"limit": "7"}, headers=ada)).json()
    assert exact["next_cursor"] is None  # no cursor to an empty page


async def test_default_page_is_twenty(client: Client, ada: dict[str, str]) -> None:
    for i in range(21):
        await create(client, ada, url=f"https://example.org/{i}")
    page = await (await client.get("/v1/links", headers=ada)).json()
    assert len(page["items"]) == 20
    assert page["next_cursor"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "abc"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": ""}, "limit"),
        ({"cursor": "not a cursor"}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b"2020-01-01 x").decode()}, "cursor"),
        ({"cursor": ""}, "cursor"),
    ],
)
async def test_bad_limit_or_cursor_is_422(
    client: Client, ada: dict[str, str], params: dict[str, str], field: str
) -> None:
    body = await problem(await client.get("/v1/links", params=params, headers=ada), 422)
    assert [e["field"] for e in body["errors"]] == [field]


async def test_patch_changes_only_what_it_names(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    link = await create(client, ada, expires_at=FUTURE)
    url = f"/v1/links/{link['code']}"

    async def patch(body: dict[str, Any]) -> dict[str, Any]:
        response = await client.patch(url, json=body, headers=ada)
        assert response.status == 200, await response.text()
        result: dict[str, Any] = await response.json()
        assert result == await (await client.get(url, headers=ada)).json()
        return result

    disabled = await patch({"disabled": True})
    assert (disabled["disabled"], disabled["expires_at"]) == (True, FUTURE)  # absent: kept
    moved = await patch({"url": "https://example.net/new"})
    assert (moved["url"], moved["disabled"], moved["expires_at"]) == (
        "https://example.net/new",
        True,
        FUTURE,
    )
    cleared = await patch({"expires_at": None})
    assert cleared["expires_at"] is None  # null: removed
    later = await patch({"expires_at": "3000-06-01T12:00:00-02:00", "disabled": False})
    assert (later["expires_at"], later["disabled"]) == ("3000-06-01T14:00:00Z", False)
    same = await patch({})
    assert same == later
    assert (same["code"], same["created_at"], same["short_url"]) == (
        link["code"],
        link["created_at"],
        link["short_url"],
    )

    events = await link_events(store)
    assert [type(e) for e, _ in events] == [LinkCreated] + [LinkUpdated] * 5
    states = [(e.url, e.expires_at, e.disabled) for e, _ in events[1:]]
    far = datetime(2999, 1, 1, tzinfo=UTC)
    then = datetime(3000, 6, 1, 14, tzinfo=UTC)
    assert states == [
        ("https://example.org/", far, True),
        ("https://example.net/new", far, True),
        ("https://example.net/new", None, True),
        ("https://example.net/new", then, False),
        ("https://example.net/new", then, False),
    ]
    assert all(e.code == link["code"] and e.trace_id == t for e, t in events)


async def test_invalid_patches_change_nothing(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    link = await create(client, ada)
    url = f"/v1/links/{link['code']}"
    for body, field in [
        ({"url": "javascript:alert(1)"}, "url"),
        ({"url": "http://127.0.0.1:8080/x"}, "url"),
        ({"expires_at": "2000-01-01T00:00:00Z"}, "expires_at"),
        ({"expires_at": "soon"}, "expires_at"),
        ({"expires_at": "9999-12-31T23:59:59-14:00"}, "expires_at"),
    ]:
        answer = await problem(await client.patch(url, json=body, headers=ada), 422)
        assert [e["field"] for e in answer["errors"]] == [field]
    for body in [{"url": None}, {"disabled": "yes"}, {"code": "other1"}, {"alias": "x"}]:
        await problem(await client.patch(url, json=body, headers=ada), 400)
    await problem(await client.patch(url, headers=ada), 400)  # no body at all
    assert [type(e) for e, _ in await link_events(store)] == [LinkCreated]
    assert await (await client.get(url, headers=ada)).json() == link


async def test_a_past_expiry_can_be_cleared_and_links_are_never_deleted(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    link = await create(client, ada, expires_at=FUTURE)
    async with store.transaction() as tx:  # time passes
        await tx.execute(
            "UPDATE links SET expires_at = ? WHERE code = ?",
            ("2001-01-01T00:00:00.000000Z", link["code"]),
        )
    got = await client.get(f"/v1/links/{link['code']}", headers=ada)
    assert (await got.json())["expires_at"] == "2001-01-01T00:00:00Z"  # expired, kept
    response = await client.patch(
        f"/v1/links/{link['code']}", json={"expires_at": None}, headers=ada
    )
    assert (await response.json())["expires_at"] is None
    await problem(await client.delete(f"/v1/links/{link['code']}", headers=ada), 405)


# The code pool through the API.


async def test_200_links_at_once_get_200_distinct_pool_codes(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(code_pool_target=300)))
    assert client.app is not None
    store = client.app[STORE_KEY]
    assert await refill(store, 300) == 300
    pooled = {str(r[0]) for r in await store.fetchall("SELECT code FROM code_pool")}
    auth = await user_token(client)
    responses = await asyncio.gather(
        *(
            client.post("/v1/links", json={"url": f"https://example.org/{i}"}, headers=auth)
            for i in range(200)
        )
    )
    assert [r.status for r in responses] == [201] * 200
    codes = {(await r.json())["code"] for r in responses}
    assert len(codes) == 200
    assert codes <= pooled
    taken = await store.fetchone("SELECT COUNT(*) FROM code_pool WHERE taken = 1")
    assert taken == (200,)
    created = [e for e, _ in await link_events(store)]
    assert sorted(e.code for e in created) == sorted(codes)


async def test_with_an_empty_pool_links_still_get_distinct_codes(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(code_pool_target=0)))
    assert client.app is not None
    auth = await user_token(client)
    responses = await asyncio.gather(
        *(
            client.post("/v1/links", json={"url": "https://example.org/"}, headers=auth)
            for _ in range(50)
        )
    )
    assert [r.status for r in responses] == [201] * 50
    codes = {(await r.json())["code"] for r in responses}
    assert len(codes) == 50
    assert all(CODE.fullmatch(code) for code in codes)
    # Codes made on the spot are recorded as taken, so no refill hands them out again.
    store = client.app[STORE_KEY]
    assert await store.fetchone("SELECT COUNT(*) FROM code_pool WHERE taken = 1") == (50,)


async def test_the_app_does_not_fill_the_pool_at_startup(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config()))  # the default target, 100000
    assert client.app is not None
    assert LinksSettings.of(client.app[CONFIG_KEY]).code_pool_target == 100_000
    assert (await client.get("/healthz")).status == 200
    assert await free_codes(client.app[STORE_KEY]) == 0
    assert not client.app[POOL_REFILLER].running


async def test_a_link_that_finds_the_pool_low_refills_it_in_the_background(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    assert client.app is not None
    first = await create(client, ada)  # the pool is empty: a code made on the spot
    await client.app[POOL_REFILLER].wait()
    assert await free_codes(store) == 150
    second = await create(client, ada)
    assert await free_codes(store) == 149
    row = await store.fetchone("SELECT taken FROM code_pool WHERE code = ?", (second["code"],))
    assert row == (1,)
    assert first["code"] != second["code"]


async def test_a_pool_code_equal_to_an_alias_is_skipped(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(code_pool_target=0)))
    assert client.app is not None
    store = client.app[STORE_KEY]
    auth = await user_token(client)
    await create(client, auth, alias="Abc123")
    await create(client, auth, alias="plainalias")
    # A refill that later generates the alias as a code finds it taken already...
    row = await store.fetchone("SELECT taken FROM code_pool WHERE code = 'Abc123'")
    assert row == (1,)
    assert await store.fetchone("SELECT 1 FROM code_pool WHERE code = 'plainalias'") is None
    # ...and one that put it in the pool before the alias existed is skipped on creation.
    async with store.transaction() as tx:
        await tx.execute("INSERT INTO code_pool (code, taken) VALUES ('Xyz789', 0)")
    await create(client, auth, alias="Xyz789")
    async with store.transaction() as tx:
        await tx.execute("UPDATE code_pool SET taken = 0 WHERE code = 'Xyz789'")
    link = await create(client, auth)
    assert link["code"] != "Xyz789"
    assert CODE.fullmatch(link["code"])
    assert await free_codes(store) == 0


async def test_links_are_created_changed_and_followed_with_redis_down(
    client: Client, store: Store, ada: dict[str, str], redis_server: RedisServer
) -> None:
    # docs/concepts/index.md: the database is the source of truth; the relay publishes the changes
    # once Redis is back.
    redis_server.stop()
    code = (await create(client, ada, url="https://example.org/down"))["code"]
    patched = await client.patch(
        f"/v1/links/{code}", json={"url": "https://example.org/changed"}, headers=ada
    )
    assert patched.status == 200, await patched.text()
    read = await client.get(f"/v1/links/{code}", headers=ada)
    assert (await read.json())["url"] == "https://example.org/changed"
    redirect = await client.get(f"/{code}", allow_redirects=False)
    assert (redirect.status, redirect.headers["Location"]) == (302, "https://example.org/changed")
    events = [event for event, _ in await link_events(store)]
    assert [(type(e).__name__, e.code, e.url) for e in events] == [
        ("LinkCreated", code, "https://example.org/down"),
        ("LinkUpdated", code, "https://example.org/changed"),
    ]


async def test_a_code_made_on_the_spot_that_is_taken_is_drawn_again(
    aiohttp_client: AiohttpClient,
    make_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = await aiohttp_client(create_app(make_config(code_pool_target=0)))
    auth = await user_token(client)
    await create(client, auth, alias="Abc123")
    # The generator draws the alias first (a clash of two random codes, made certain).
    draws = iter(["Abc123", "Abc123", "Zyx987"])
    monkeypatch.setattr(repository, "new_code", lambda: next(draws))
    link = await create(client, auth)
    assert link["code"] == "Zyx987"
    # Every draw failing: a clear 503, and nothing written.
    monkeypatch.setattr(repository, "new_code", lambda: "Abc123")
    body = await problem(
        await client.post("/v1/links", json={"url": "https://example.org/"}, headers=auth), 503
    )
    assert "code" in body["detail"]
    assert client.app is not None
    created = [e.code for e, _ in await link_events(client.app[STORE_KEY])]
    assert created == ["Abc123", "Zyx987"]
