"""Password links (docs/guides/links.md, "Password links"): the field's rules, the form a
GET answers, the page that opens the target and the visit a right POST answers, the limit
of five wrong passwords per link and client, and the password never leaving the links
table as anything but ``has_password``."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from sluice.app.assembly import create_app
from sluice.builtin.links.events import LinkCreated, LinkUpdated, LinkVisited
from sluice.builtin.links.http.keys import LINK_CACHE
from sluice.builtin.links.http.link_passwords import LinkPasswordLimiter
from sluice.config import Config
from sluice.errors import TooManyRequests
from sluice.http.login_limit import WINDOW_SECONDS, LoginLimiter
from sluice.store import Store
from sluice.streams.engine_keys import Keys
from tests.api.helpers import AiohttpClient, Client, problem, stored_events, user_token
from tests.api.link_helpers import committed, create, patch

SECRET = "correct horse battery"
PROXY = "127.0.0.1/32"  # the test client's address: X-Forwarded-For then names the client
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(trusted_proxies=PROXY)


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


def client_at(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


async def unlock(
    client: Client, code: str, password: str, headers: dict[str, str] | None = None
) -> Any:
    return await client.post(
        f"/{code}", data={"password": password}, headers=headers, allow_redirects=False
    )


async def visits(client: Client, store: Store, code: str) -> int:
    await committed(client)
    return sum(
        1 for e, _ in await stored_events(store) if isinstance(e, LinkVisited) and e.code == code
    )


async def assert_form(response: Any, status: int, error: str = "") -> str:
    """The password form, accessible and self-contained, answered with ``status``: with
    no error shown for 200, else with ``error`` (a 401 says the password was wrong)."""
    assert response.status == status, await response.text()
    assert response.content_type == "text/html"
    assert response.headers["Cache-Control"] == "no-store"
    assert "Location" not in response.headers
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "form-action 'self'" in csp
    page: str = await response.text()
    assert '<html lang="en">' in page
    assert '<label for="password">' in page
    assert re.search(
        r'<input id="password" name="password" type="password" required autofocus', page
    )
    assert '<form method="post">' in page  # to the link's own URL
    assert not re.search(r"(src|href)=", page)  # no asset, from anywhere
    if status == 401:
        error = error or "Wrong password"
    if status == 200:
        assert 'role="alert"' not in page
    else:
        assert 'role="alert"' in page and error in page
        assert 'aria-describedby="form-error"' in page
    return page


async def opens(response: Any) -> str:
    """The page the right password answers, under the form's own policy: 200, opening the
    target at once without script (the ``Refresh`` header and its meta twin) and linking to
    it; no redirect, which the form's ``form-action 'self'`` would block. The target."""
    assert response.status == 200, await response.text()
    assert response.content_type == "text/html"
    assert "Location" not in response.headers
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    csp = response.headers["Content-Security-Policy"]
    for directive in ("default-src 'none'", "form-action 'self'", "frame-ancestors 'none'"):
        assert directive in csp
    refresh: str = response.headers["Refresh"]
    assert refresh.startswith("0; url=")
    page: str = await response.text()
    assert f'<meta http-equiv="refresh" content="{html.escape(refresh)}">' in page
    target = refresh.removeprefix("0; url=")
    assert f'<a href="{html.escape(target)}">' in page
    assert "<script" not in page and "<form" not in page
    return target


async def test_a_password_link_shows_its_form_and_records_nothing_until_the_right_password(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    link = await create(
        client, ada, url="https://example.org/secret", password=SECRET, redirect_status=301
    )
    code = link["code"]
    assert link["has_password"] is True and "password" not in link
    for _ in range(2):  # the second from the cache
        page = await assert_form(await client.get(f"/{code}", allow_redirects=False), 200)
        assert "example.org" not in page  # the target is not given away
    head = await client.head(f"/{code}", allow_redirects=False)
    assert head.status == 200 and "Location" not in head.headers
    assert await visits(client, store, code) == 0

    await assert_form(await unlock(client, code, "wrong password"), 401, "Wrong password")
    await assert_form(await unlock(client, code, ""), 401, "Wrong password")
    assert await visits(client, store, code) == 0

    assert await opens(await unlock(client, code, SECRET)) == "https://example.org/secret"
    assert await visits(client, store, code) == 1
    # A browser opens the target from that page; the next GET asks for the password again.
    await assert_form(await client.get(f"/{code}", allow_redirects=False), 200)
    assert await visits(client, store, code) == 1


async def test_the_right_password_applies_rules_and_counts_max_visits(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    rules = [{"when": {"language": "fr"}, "url": "https://example.fr/"}]
    link = await create(client, ada, password=SECRET, max_visits=2, rules=rules)
    code = link["code"]
    for _ in range(3):  # the form counts nothing
        await assert_form(await client.get(f"/{code}", allow_redirects=False), 200)
    french = await client.post(
        f"/{code}",
        data={"password": SECRET},
        allow_redirects=False,
        headers={"Accept-Language": "fr-FR"},
    )
    assert await opens(french) == "https://example.fr/"
    assert await opens(await unlock(client, code, SECRET)) == "https://example.org/"
    await problem(await unlock(client, code, SECRET), 410)
    await problem(await client.get(f"/{code}", allow_redirects=False), 410)
    assert await visits(client, store, code) == 2


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_every_redirect_status_opens_the_page_after_the_form(
    client: Client, ada: dict[str, str], status: int
) -> None:
    # A 307 or 308 would resend the password to the target; none is a redirect here.
    link = await create(client, ada, password=SECRET, redirect_status=status)
    assert await opens(await unlock(client, link["code"], SECRET)) == "https://example.org/"
    assert (await client.get(f"/{link['code']}", allow_redirects=False)).status == 200  # form


async def test_a_target_of_any_characters_is_opened_as_it_is_and_escaped_on_the_page(
    client: Client, ada: dict[str, str]
) -> None:
    url = """https://example.org/a;b?c=1&d='e'&f="g"<h>#i"""
    link = await create(client, ada, url=url, password=SECRET)
    assert link["url"] == url
    response = await unlock(client, link["code"], SECRET)
    assert await opens(response) == url
    page = await response.text()
    assert "<h>" not in page and '"g"' not in page


async def test_five_wrong_passwords_lock_out_that_client_from_that_link_only(
    client: Client, ada: dict[str, str]
) -> None:
    code = (await create(client, ada, password=SECRET))["code"]
    other = (await create(client, ada, password=SECRET))["code"]
    mallory, alice = client_at("203.0.113.7"), client_at("198.51.100.1")
    for _ in range(5):
        await assert_form(await unlock(client, code, "guess-guess", mallory), 401)
    for password in ("guess-guess", SECRET):  # the right one too
        limited = await unlock(client, code, password, mallory)
        await assert_form(limited, 429, "Too many wrong passwords")
        assert 800 < int(limited.headers["Retry-After"]) <= WINDOW_SECONDS
    # Another client, and the same client on another link, are not limited.
    await opens(await unlock(client, code, SECRET, alice))
    await opens(await unlock(client, other, SECRET, mallory))
    # Forwarded headers from a peer that is not a trusted proxy name no one: the peer counts.
    await assert_form(await unlock(client, code, "guess-guess"), 401)


async def test_the_failures_are_counted_across_replicas(
    aiohttp_client: AiohttpClient, config: Config
) -> None:
    first = await aiohttp_client(create_app(config))
    second = await aiohttp_client(create_app(config))
    code = (await create(first, await user_token(first), password=SECRET))["code"]
    mallory = client_at("203.0.113.7")
    for replica in (first, second, first, second, first):
        await assert_form(await unlock(replica, code, "guess-guess", mallory), 401)
    await assert_form(await unlock(second, code, SECRET, mallory), 429)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_the_limit_is_a_fifteen_minute_window_of_its_own(redis: aioredis.Redis) -> None:
    clock = Clock()
    limiter = LinkPasswordLimiter(redis, Keys("test"), clock)
    subject = "abc123 203.0.113.7"
    for _ in range(5):
        await limiter.failed(subject, await limiter.attempt(subject))
    clock.now += WINDOW_SECONDS - 1
    with pytest.raises(TooManyRequests) as refused:
        await limiter.attempt(subject)
    assert refused.value.headers["Retry-After"] == "1"
    # Logins are counted apart: the same words as an email are not limited.
    await LoginLimiter(redis, Keys("test"), clock).attempt(subject)
    clock.now += 1
    assert await limiter.attempt(subject)


@pytest.mark.parametrize(
    ("value", "status"),
    [("seven77", 422), ("x" * 129, 422), ("", 422), (12345678, 400), (["p" * 8], 400)],
)
async def test_an_invalid_password_is_refused_on_create_and_patch(
    client: Client, ada: dict[str, str], value: object, status: int
) -> None:
    response = await client.post(
        "/v1/links", json={"url": "https://example.org/", "password": value}, headers=ada
    )
    body = await problem(response, status)
    if status == 422:
        assert [e["field"] for e in body["errors"]] == ["password"]
    link = await create(client, ada)
    response = await client.patch(
        f"/v1/links/{link['code']}", json={"password": value}, headers=ada
    )
    await problem(response, status)
    assert (await client.get(f"/{link['code']}", allow_redirects=False)).status == 302


async def test_the_bounds_hold(client: Client, ada: dict[str, str]) -> None:
    for password in ("12345678", "é" * 128, " " * 8):
        code = (await create(client, ada, password=password))["code"]
        await opens(await unlock(client, code, password))


async def test_patch_sets_changes_and_removes_the_password_at_once(
    client: Client, ada: dict[str, str]
) -> None:
    code = (await create(client, ada))["code"]
    assert (await client.get(f"/{code}", allow_redirects=False)).status == 302  # cached
    added = await patch(client, ada, code, password=SECRET)
    assert added["has_password"] is True and "password" not in added
    await assert_form(await client.get(f"/{code}", allow_redirects=False), 200)
    kept = await patch(client, ada, code, title="still locked")
    assert kept["has_password"] is True
    await assert_form(await client.get(f"/{code}", allow_redirects=False), 200)
    await patch(client, ada, code, password="another secret")
    await assert_form(await unlock(client, code, SECRET), 401)
    await opens(await unlock(client, code, "another secret"))
    removed = await patch(client, ada, code, password=None)
    assert removed["has_password"] is False
    assert (await client.get(f"/{code}", allow_redirects=False)).status == 302
    # A form sent after the password went: to the link, which now redirects.
    response = await unlock(client, code, "another secret")
    assert (response.status, response.headers["Location"]) == (303, f"/{code}")


async def test_the_password_and_its_hash_are_never_answered_nor_in_an_event(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    created = await client.post(
        "/v1/links", json={"url": "https://example.org/", "password": SECRET}, headers=ada
    )
    code = (await created.json())["code"]
    changed = await client.patch(f"/v1/links/{code}", json={"password": SECRET + "!"}, headers=ada)
    read = await client.get(f"/v1/links/{code}", headers=ada)
    listed = await client.get("/v1/links", headers=ada)
    for response in (created, changed, read, listed):
        text = await response.text()
        assert SECRET not in text and "scrypt" not in text
        assert '"has_password":true' in text
    await unlock(client, code, SECRET + "!")
    await committed(client)
    rows = await store.events_after(0, 1000)
    assert rows and not any(SECRET.encode() in r.payload or b"scrypt" in r.payload for r in rows)
    events = [e for e, _ in await stored_events(store) if isinstance(e, LinkCreated | LinkUpdated)]
    assert [e.has_password for e in events] == [True, True]
    # Stored, as a hash only.
    row = await store.fetchone("SELECT password_hash FROM links WHERE code = ?", (code,))
    assert row is not None and str(row[0]).startswith("scrypt$") and SECRET not in str(row[0])


async def test_a_post_that_is_not_a_form_or_of_no_password_link(
    client: Client, ada: dict[str, str]
) -> None:
    code = (await create(client, ada, password=SECRET))["code"]
    await problem(await client.post(f"/{code}", json={"password": SECRET}), 415)
    bad = await client.post(f"/{code}", data=b"password=%ff", headers={"Content-Type": FORM})
    await problem(bad, 400)
    await problem(await unlock(client, "nosuchcode", SECRET), 404)
    plain = (await create(client, ada))["code"]
    response = await unlock(client, plain, SECRET)
    assert (response.status, response.headers["Location"]) == (303, f"/{plain}")
    await patch(client, ada, code, disabled=True)
    await problem(await unlock(client, code, SECRET), 410)


async def test_the_fast_path_leaves_a_password_link_to_its_form(
    client: Client, ada: dict[str, str]
) -> None:
    assert client.app is not None  # served as `sluice api` serves it: both fast paths
    locked = (await create(client, ada, password=SECRET))["code"]
    plain = (await create(client, ada))["code"]
    for _ in range(3):  # a miss, then hits: the fast path's turn
        await assert_form(await client.get(f"/{locked}", allow_redirects=False), 200)
        assert (await client.get(f"/{plain}", allow_redirects=False)).status == 302
    assert client.app[LINK_CACHE].cached(locked) is not None  # it was cached all along
