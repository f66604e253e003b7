"""Verifying an address (docs/guides/security.md): the welcome mail's signed link, its page, expiry,
forgery and reuse, GET /v1/me, and asking for a new link."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from sluice.builtin.accounts.events import UserVerified, VerificationRequested
from sluice.builtin.accounts.http.keys import MAIL_LINK_KEY
from sluice.builtin.accounts.mail.links import verify_token
from sluice.events import utcnow
from sluice.store import Store
from sluice.store.users import db_time
from tests.api.helpers import Client, bearer, login, problem, register, stored_events


async def token_for(client: Client, user: dict[str, Any], expires: datetime | None = None) -> str:
    """A link as the mail worker signs it (same key: kept in the database)."""
    assert client.app is not None
    key = await client.app[MAIL_LINK_KEY].get()
    return verify_token(key, user["id"], user["email"], expires or utcnow() + timedelta(days=7))


async def me(client: Client, auth: dict[str, str]) -> dict[str, Any]:
    response = await client.get("/v1/me", headers=auth)
    assert response.status == 200
    body: dict[str, Any] = await response.json()
    return body


async def signed_in(client: Client, email: str = "ada@example.org") -> tuple[Any, dict[str, str]]:
    user = await register(client, email=email)
    response = await login(client, email=email)
    return user, bearer((await response.json())["token"])


async def verified_events(store: Store) -> list[UserVerified]:
    return [e for e, _ in await stored_events(store) if isinstance(e, UserVerified)]


async def test_a_new_user_is_unverified_and_a_link_used_twice_verifies_once(
    client: Client, store: Store
) -> None:
    user, auth = await signed_in(client)
    assert user["verified"] is False and user["verified_at"] is None
    assert (await me(client, auth))["verified"] is False
    token = await token_for(client, user)

    first = await client.post("/v1/users/verify", json={"token": token})
    assert first.status == 200
    body = await first.json()
    assert (body["user_id"], body["email"]) == (user["id"], "ada@example.org")
    again = await client.post("/v1/users/verify", json={"token": token})
    assert again.status == 200
    assert (await again.json())["verified_at"] == body["verified_at"]  # harmless, unchanged

    now = await me(client, auth)
    assert now["verified"] is True and now["verified_at"] == body["verified_at"]
    [event] = await verified_events(store)
    assert (event.user_id, event.email) == (user["id"], "ada@example.org")


async def test_the_mailed_link_shows_a_page_and_only_its_button_verifies(client: Client) -> None:
    # Mail scanners follow links: the GET must not verify anything.
    user, auth = await signed_in(client)
    token = await token_for(client, user)
    page = await client.get("/v1/verify", params={"token": token})
    assert page.status == 200
    assert page.content_type == "text/html"
    html = await page.text()
    assert '<form method="post" action="/v1/users/verify">' in html
    assert f'name="token" value="{token}"' in html
    assert "ada@example.org" in html
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["Cache-Control"] == "no-store"
    assert (await me(client, auth))["verified"] is False

    posted = await client.post("/v1/users/verify", data={"token": token})  # the form
    assert posted.status == 200
    assert posted.content_type == "text/html"
    assert "is verified" in await posted.text()
    assert (await me(client, auth))["verified"] is True
    shown_again = await client.get("/v1/verify", params={"token": token})
    assert shown_again.status == 200
    assert "<form" not in await shown_again.text()


async def test_an_expired_link_is_410_until_the_address_is_verified(client: Client) -> None:
    user, auth = await signed_in(client)
    old = await token_for(client, user, expires=utcnow() - timedelta(seconds=1))
    for answer in (
        await client.get("/v1/verify", params={"token": old}),
        await client.post("/v1/users/verify", json={"token": old}),
    ):
        body = await problem(answer, 410)
        assert "POST /v1/me/verification" in body["detail"]
    assert (await me(client, auth))["verified"] is False

    fresh = await token_for(client, user)
    assert (await client.post("/v1/users/verify", json={"token": fresh})).status == 200
    # Once verified, an old genuine link is as harmless as a second use.
    assert (await client.post("/v1/users/verify", json={"token": old})).status == 200


async def test_forged_and_malformed_links_are_422_and_verify_nothing(
    client: Client, store: Store
) -> None:
    ada, auth = await signed_in(client)
    eve, _ = await signed_in(client, email="eve@example.org")
    genuine = await token_for(client, eve)
    version, _, expiry, mac = genuine.split(".")
    forged = [
        f"{version}.{ada['id']}.{expiry}.{mac}",  # Eve's signature on Ada's id
        verify_token(b"a key of my own", ada["id"], ada["email"], utcnow() + timedelta(days=1)),
        genuine[:-1] + ("A" if genuine[-1] != "A" else "B"),
        "not-a-token",
        "",
    ]
    for token in forged:
        body = await problem(await client.post("/v1/users/verify", json={"token": token}), 422)
        assert body["errors"][0]["field"] == "token"
        await problem(await client.get("/v1/verify", params={"token": token}), 422)
    await problem(await client.get("/v1/verify"), 422)
    await problem(await client.post("/v1/users/verify", json={"token": 12}), 400)
    await problem(await client.post("/v1/users/verify", json={"token": "x", "user": "y"}), 400)
    assert (await me(client, auth))["verified"] is False
    assert await verified_events(store) == []


async def _two_hours_pass(store: Store, user_id: str) -> None:
    async with store.transaction() as tx:
        await tx.execute(
            "UPDATE users SET created_at = ?, verification_requested_at = ? WHERE id = ?",
            (db_time(utcnow() - timedelta(hours=3)), None, user_id),
        )
        await tx.execute(
            "UPDATE users SET verification_requested_at = ? WHERE id = ?"
            " AND verification_requests > 0",
            (db_time(utcnow() - timedelta(hours=2)), user_id),
        )


async def test_new_links_once_an_hour_three_in_all_and_none_once_verified(
    client: Client, store: Store
) -> None:
    user, auth = await signed_in(client)
    # The welcome mail went out at registration: too soon for another.
    refused = await client.post("/v1/me/verification", headers=auth)
    assert 3500 <= int(refused.headers["Retry-After"]) <= 3600
    assert "less than an hour ago" in (await problem(refused, 429))["detail"]
    for i in range(3):
        await _two_hours_pass(store, user["id"])
        sent = await client.post("/v1/me/verification", headers=auth)
        assert sent.status == 202
        assert await sent.json() == {"email": "ada@example.org"}
        await problem(await client.post("/v1/me/verification", headers=auth), 429 if i < 2 else 409)
    await _two_hours_pass(store, user["id"])
    used_up = await problem(await client.post("/v1/me/verification", headers=auth), 409)
    assert "3 new verification links" in used_up["detail"]
    asked = [e for e, _ in await stored_events(store) if isinstance(e, VerificationRequested)]
    assert [(e.user_id, e.email) for e in asked] == [(user["id"], "ada@example.org")] * 3

    await client.post("/v1/users/verify", json={"token": await token_for(client, user)})
    verified = await problem(await client.post("/v1/me/verification", headers=auth), 409)
    assert "verified already" in verified["detail"]
    await problem(await client.post("/v1/me/verification"), 401)


@pytest.mark.parametrize(
    ("content_type", "data", "status"),
    [
        ("application/x-www-form-urlencoded; charset=bogus", b"token=abc", 422),
        ("application/x-www-form-urlencoded", b"token=%ff%fe", 400),
        ("application/x-www-form-urlencoded", b"\xff\xfe=\x00", 400),
        ("application/x-www-form-urlencoded", b"&".join([b"a=1"] * 21), 400),
        ("multipart/form-data; boundary=x", b"--x\r\nbroken", 415),
        ("text/plain", b"token=abc", 415),
    ],
)
async def test_odd_bodies_get_a_4xx_never_a_5xx(
    client: Client, content_type: str, data: bytes, status: int
) -> None:
    answer = await client.post(
        "/v1/users/verify", data=data, headers={"Content-Type": content_type}
    )
    await problem(answer, status)
