"""Users and tokens: registration, login, logout, expiry, and the admin token."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import math
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog

from sluice.app.assembly import create_app
from sluice.app.testing import patience, wait_for
from sluice.builtin.accounts.events import UserRegistered
from sluice.builtin.accounts.http import users
from sluice.builtin.accounts.mail.sending import Outgoing, compose
from sluice.builtin.accounts.mail.templates import Content
from sluice.config import Config
from sluice.errors import HandlerError
from sluice.http import admin_token
from sluice.http.login_limit import MAX_FAILURES
from sluice.store import Store
from tests.api.helpers import (
    PASSWORD,
    AiohttpClient,
    Client,
    bearer,
    login,
    problem,
    register,
    stored_events,
)

ADMIN_TOKEN = "s3cret-admin-token-0123456789abcdef"


async def test_registration_commits_the_user_and_its_event_together(
    client: Client, store: Store
) -> None:
    user = await register(client, name="Ada")
    assert user["email"] == "Ada@Example.org"
    assert user["name"] == "Ada"
    assert datetime.fromisoformat(user["created_at"]).tzinfo is not None
    [(event, trace_id)] = await stored_events(store)
    assert isinstance(event, UserRegistered)
    assert (event.user_id, event.email, event.name) == (user["id"], "Ada@Example.org", "Ada")
    assert trace_id and event.trace_id == trace_id


async def test_emails_are_unique_case_insensitively(client: Client, store: Store) -> None:
    await register(client)
    response = await client.post(
        "/v1/users", json={"email": "ADA@example.ORG", "password": PASSWORD}
    )
    await problem(response, 409)
    assert len(await stored_events(store)) == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"password": PASSWORD}, "email"),
        ({"email": "a@example.org"}, "password"),
        ({"email": "not-an-email", "password": PASSWORD}, "email"),
        ({"email": "a@b", "password": PASSWORD}, "email"),
        ({"email": "a@example.org", "password": "short"}, "password"),
        ({"email": "a@example.org", "password": "x" * 129}, "password"),
        ({"email": "a@example.org", "password": PASSWORD, "name": ""}, "name"),
    ],
)
async def test_invalid_registrations_are_422_and_write_nothing(
    client: Client, store: Store, body: dict[str, str], field: str
) -> None:
    answer = await problem(await client.post("/v1/users", json=body), 422)
    assert field in {e["field"] for e in answer["errors"]}
    assert await stored_events(store) == []


# These once got a 201, and then the welcome mail could not even be written: it
# went straight to the dead letters.
UNWRITABLE = [
    "a..b@example.com",
    "foo,bar@example.com",
    "a<b>@example.com",
    "(x)@example.com",
    "\u00fc@example.com",
    ".a@example.com",
    "a.@example.com",
]
# The mail can be written to these, but no mail server takes them (a raw non-ASCII
# domain needs SMTPUTF8, DNS labels do not start with a hyphen, no top level is numeric,
# a local part is at most 64 characters) or sluice does not write them (quoted parts).
UNDELIVERABLE = [
    "user@ex\u00e4mple.com",
    "user@-bad.com",
    "a@example.123",
    f"{'a' * 65}@example.com",
    '"quoted"@example.com',
]


@pytest.mark.parametrize("email", UNWRITABLE + UNDELIVERABLE)
async def test_addresses_no_welcome_mail_can_reach_are_422(
    client: Client, store: Store, email: str
) -> None:
    if email in UNWRITABLE:
        with pytest.raises(HandlerError):
            compose(Outgoing("welcome_x", email, Content("Welcome", "Hello")), "sluice@localhost")
    response = await client.post("/v1/users", json={"email": email, "password": PASSWORD})
    answer = await problem(response, 422)
    assert [e["field"] for e in answer["errors"]] == ["email"]
    assert await stored_events(store) == []


@pytest.mark.parametrize(
    "email",
    [
        "o'brien+tag@mail.example.co.uk",
        "x_y-z@xn--80ak6aa92e.com",
        "a@example.xn--p1ai",
        "first.last@sub.example.museum",
        f"{'a' * 64}@example.com",
    ],
)
async def test_unusual_but_mailable_addresses_register(client: Client, email: str) -> None:
    compose(Outgoing("welcome_x", email, Content("Welcome", "Hello")), "sluice@localhost")
    assert (await register(client, email=email))["email"] == email


async def test_malformed_oversized_and_non_json_registrations(client: Client, store: Store) -> None:
    await problem(await client.post("/v1/users", json={"email": 5, "password": PASSWORD}), 400)
    await problem(
        await client.post("/v1/users", data=b"{", headers={"Content-Type": "application/json"}),
        400,
    )
    huge = json.dumps({"email": "a@example.org", "password": "x" * (10 * 1024 * 1024)})
    await problem(
        await client.post(
            "/v1/users",
            data=io.BytesIO(huge.encode()),
            headers={"Content-Type": "application/json"},
        ),
        413,
    )
    await problem(
        await client.post(
            "/v1/users",
            data="email=a",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        ),
        415,
    )
    assert await stored_events(store) == []


async def test_login_me_and_logout(client: Client) -> None:
    user = await register(client)
    response = await login(client, email="ADA@example.org")
    assert response.status == 201
    body = await response.json()
    expires = datetime.fromisoformat(body["expires_at"])
    assert timedelta(days=29) < expires - datetime.now(UTC) <= timedelta(days=30)
    me = await client.get("/v1/me", headers=bearer(body["token"]))
    assert (await me.json())["id"] == user["id"]

    assert (await client.delete("/v1/tokens/current", headers=bearer(body["token"]))).status == 204
    await problem(await client.get("/v1/me", headers=bearer(body["token"])), 401)
    await problem(await client.delete("/v1/tokens/current", headers=bearer(body["token"])), 401)


async def test_unknown_email_and_wrong_password_get_the_same_answer(client: Client) -> None:
    await register(client)
    unknown = await problem(await login(client, email="nobody@example.org"), 401)
    wrong = await problem(await login(client, password="wrong password"), 401)
    assert unknown == wrong


async def test_missing_and_malformed_tokens_are_401(client: Client) -> None:
    response = await client.get("/v1/me")
    await problem(response, 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    await problem(await client.get("/v1/me", headers={"Authorization": "Basic YTpi"}), 401)
    await problem(await client.get("/v1/me", headers=bearer("made-up")), 401)


async def test_five_failures_lock_the_email_for_fifteen_minutes(client: Client) -> None:
    await register(client)
    for _ in range(5):
        await problem(await login(client, password="wrong password"), 401)
    locked = await login(client)  # even the right password
    await problem(locked, 429)
    assert 800 < int(locked.headers["Retry-After"]) <= 900
    other = await register(client, email="bob@example.org")
    assert other["email"] == "bob@example.org"
    assert (await login(client, email="bob@example.org")).status == 201


async def unshared(aiohttp_client: AiohttpClient, make_config: Callable[..., Config]) -> Client:
    """A client whose logins at once all reach the login windows: the password hasher's
    share per address (2 at once, tests/api/test_hasher_fairness.py) set off."""
    return await aiohttp_client(create_app(make_config(password_hash_per_claimant=0)))


async def test_twenty_wrong_passwords_at_once_get_five_tries(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await unshared(aiohttp_client, make_config)
    await register(client)
    answers = await asyncio.gather(
        *(login(client, password=f"wrong password {i}") for i in range(20))
    )
    assert sorted(a.status for a in answers) == [401] * 5 + [429] * 15
    await problem(await login(client), 429)  # the right password too, until the window moves


@pytest.mark.parametrize("shared", [False, True], ids=["unshared", "shared"])
async def test_right_passwords_at_once_are_never_told_they_failed(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config], shared: bool
) -> None:
    """Unshared: the login window's busy answers; shared (the default): the address's
    share of the hasher (2) lets fewer through at once, and is never a failure either."""
    if shared:
        client = await aiohttp_client(create_app(make_config()))
    else:
        client = await unshared(aiohttp_client, make_config)
    await register(client)
    answers = await asyncio.gather(*(login(client) for _ in range(8)))
    statuses = [a.status for a in answers]
    assert set(statuses) <= {201, 429} and statuses.count(201) >= (2 if shared else 5)
    for busy in (a for a in answers if a.status == 429):
        body = await problem(busy, 429)
        assert "being checked" in body["detail"] and busy.headers["Retry-After"] == "1"
    assert (await login(client)).status == 201


async def test_the_limit_holds_across_api_replicas(
    aiohttp_client: AiohttpClient, config: Config
) -> None:
    first = await aiohttp_client(create_app(config))
    second = await aiohttp_client(create_app(config))
    await register(first)
    for replica in (first, second, first, second, first):
        await problem(await login(replica, password="wrong password"), 401)
    await problem(await login(second), 429)
    await problem(await login(first), 429)


async def test_tokens_expire(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    ttl = math.ceil(patience(1))  # the first GET below comes within it on a loaded machine
    client = await aiohttp_client(create_app(make_config(token_ttl_seconds=ttl)))
    await register(client)
    token = (await (await login(client)).json())["token"]
    assert (await client.get("/v1/me", headers=bearer(token))).status == 200

    async def expired() -> bool:
        return (await client.get("/v1/me", headers=bearer(token))).status == 401

    await wait_for(expired, timeout=ttl + 5, interval=0.05)
    await problem(await client.get("/v1/me", headers=bearer(token)), 401)


async def test_admin_routes_need_the_admin_token_not_a_user_token(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(admin_token=ADMIN_TOKEN)))
    await register(client)
    user_token = (await (await login(client)).json())["token"]
    await problem(await client.get("/v1/admin/streams"), 401)
    await problem(await client.get("/v1/admin/streams", headers=bearer("guess")), 401)
    await problem(await client.get("/v1/admin/streams", headers=bearer(user_token)), 403)
    ok = await client.get("/v1/admin/streams", headers=bearer(ADMIN_TOKEN))
    assert ok.status == 200
    assert set(await ok.json()) == {"relay_backlog", "delayed", "streams", "stalled", "paused"}


async def test_without_an_admin_token_configured_admin_routes_refuse_everyone(
    client: Client,
) -> None:
    await problem(await client.get("/v1/admin/streams", headers=bearer("anything")), 401)


async def test_a_token_sluice_up_generated_on_another_host_is_accepted(
    client: Client, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No SLUICE_ADMIN_TOKEN here: the hash ``sluice up`` recorded in the database (on
    any host, after this API started) opens the admin routes; only the hash is stored."""
    monkeypatch.setattr(admin_token, "RECHECK", 0.0)
    await problem(await client.get("/v1/admin/streams", headers=bearer("generated-token")), 401)
    await admin_token.record_generated(store, "generated-token")
    ok = await client.get("/v1/admin/streams", headers=bearer("generated-token"))
    assert ok.status == 200
    await problem(await client.get("/v1/admin/streams", headers=bearer("other-token")), 401)
    rows = await store.fetchall("SELECT value FROM secrets")
    assert "generated-token" not in str(rows)


async def test_a_logged_in_viewer_counts_once_whatever_the_body_says(
    client: Client, store: Store
) -> None:
    await register(client)
    token = (await (await login(client)).json())["token"]
    first = await client.post("/v1/articles/a/views", json={"viewer": "x"}, headers=bearer(token))
    second = await client.post("/v1/articles/a/views", json={"viewer": "y"}, headers=bearer(token))
    assert [await first.json(), await second.json()] == [{"counted": True}, {"counted": False}]


async def test_no_password_or_token_reaches_the_logs(client: Client) -> None:
    with structlog.testing.capture_logs() as logs:
        await register(client)
        await problem(await login(client, password="wrong password"), 401)
        token = (await (await login(client)).json())["token"]
        await client.get("/v1/me", headers=bearer(token))
        await client.delete("/v1/tokens/current", headers=bearer(token))
    assert len(logs) >= 5
    text = repr(logs)
    for secret in (PASSWORD, "wrong password", token):
        assert secret not in text


async def test_logins_while_the_database_fails_are_503_and_not_counted(
    client: Client, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(client)

    async def disk_failing(*args: Any) -> None:
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = sqlite3.SQLITE_IOERR
        raise error

    with monkeypatch.context() as patch:
        patch.setattr(users, "credentials", disk_failing)
        for _ in range(MAX_FAILURES + 2):
            await problem(await login(client), 503)
    assert [key async for key in redis.scan_iter(match="*:login:*")] == []
    assert (await login(client)).status == 201  # no 429: nothing counted as failed


async def test_only_hashes_of_passwords_and_tokens_are_stored(client: Client, store: Store) -> None:
    await register(client)
    token = (await (await login(client)).json())["token"]
    [(password_hash,)] = await store.fetchall("SELECT password_hash FROM users")
    scheme, n, r, p, salt, digest = str(password_hash).split("$")
    assert (scheme, n, r, p) == (
        "scrypt",
        "16384",
        "8",
        "1",
    )  # memory-hard (security guide)
    assert PASSWORD not in str(password_hash)
    assert base64.b64decode(salt) and len(base64.b64decode(digest)) >= 32
    [(stored,)] = await store.fetchall("SELECT token_hash FROM tokens")
    assert stored == hashlib.sha256(token.encode()).hexdigest() and token not in str(stored)
