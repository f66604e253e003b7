"""Nobody locks an owner out by knowing the address, and guessing stays slow
(docs/guides/security.md, "Who a stranger can and cannot lock out"); what an owner
needs after a scare: the password changed (every other token revoked), tokens listed and
revoked one by one.

Issue 43's finding: five wrong passwords for an email made even the right password 429
for 15 minutes, from everywhere. Failures now count per email and client address (5 in
15 minutes) and per email from everywhere (20 in an hour, which a client that logged
in to the account before passes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from sluice.config import Config
from sluice.embedded.redis_server import free_port
from sluice.errors import TooManyRequests
from sluice.http.account_logins import AccountLogins
from sluice.http.login_limit import MAX_FAILURES
from sluice.streams.engine_keys import Keys
from tests.api.helpers import Client, problem
from tests.link_helpers import bearer

PASSWORD = "correct horse battery"
NEW_PASSWORD = "a much better passphrase"
OWNER = "ada@example.org"
PROXY = "127.0.0.1/32"  # the test client's address: X-Forwarded-For then names the client
HOME = {"X-Forwarded-For": "192.0.2.10"}  # where the owner logs in from
# The email's window from every client new to the account, as the security guide says.
EMAIL_MAX_FAILURES, EMAIL_WINDOW_SECONDS = 20, 60 * 60


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(trusted_proxies=PROXY)


def stranger(n: int) -> dict[str, str]:
    return {"X-Forwarded-For": f"198.51.100.{n + 1}"}


async def login(
    client: Client, password: str = PASSWORD, headers: dict[str, str] | None = None
) -> Any:
    body = {"email": OWNER, "password": password}
    return await client.post("/v1/tokens", json=body, headers=headers)


async def token(client: Client, headers: dict[str, str] = HOME, password: str = PASSWORD) -> str:
    response = await login(client, password, headers)
    assert response.status == 201, await response.text()
    value: str = (await response.json())["token"]
    return value


@pytest.fixture
async def owner(client: Client) -> str:
    """The owner, registered, with a token from their own address."""
    body = {"email": OWNER, "password": PASSWORD}
    assert (await client.post("/v1/users", json=body, headers=HOME)).status == 201
    return await token(client)


async def guesses(client: Client, addresses: range, each: int = MAX_FAILURES) -> list[int]:
    """``each`` wrong passwords from each of ``addresses``: the statuses."""
    return [
        (await login(client, f"guess {n}.{i}", stranger(n))).status
        for n in addresses
        for i in range(each)
    ]


@pytest.mark.topologies("single", "cluster")
async def test_a_strangers_fifty_wrong_passwords_do_not_stop_the_owner_at_home(
    client: Client, owner: str
) -> None:
    statuses = await guesses(client, range(10))
    assert statuses.count(401) == EMAIL_MAX_FAILURES  # then the email's hour is used up
    assert set(statuses) == {401, 429}
    await token(client)  # from home: 201, at once


@pytest.mark.topologies("single", "cluster")
async def test_an_address_that_failed_five_times_gets_429_and_one_that_did_not_gets_in(
    client: Client, owner: str
) -> None:
    assert await guesses(client, range(1)) == [401] * MAX_FAILURES
    used_up = await login(client, headers=stranger(0))  # the right password, same address
    body = await problem(used_up, 429)
    assert "from this address" in body["detail"]
    assert 0 < int(used_up.headers["Retry-After"]) <= 15 * 60
    # A client that has not failed, never seen before: the right password gets in.
    await token(client, {"X-Forwarded-For": "203.0.113.99"})


@pytest.mark.topologies("single", "cluster")
async def test_many_addresses_guessing_one_account_are_slowed_to_the_email_s_hour(
    client: Client, owner: str
) -> None:
    addresses = range(EMAIL_MAX_FAILURES // MAX_FAILURES)
    assert await guesses(client, addresses) == [401] * EMAIL_MAX_FAILURES
    # One more address: refused before its password is checked, right or wrong, until
    # the oldest failure is an hour old.
    for password in ("one more guess", PASSWORD):
        slowed = await login(client, password, stranger(len(addresses)))
        body = await problem(slowed, 429)
        assert "slowed down" in body["detail"]
        assert EMAIL_WINDOW_SECONDS - 60 < int(slowed.headers["Retry-After"]) <= 3600
    # A client new to the account is slowed too (it cannot be told from a guesser)...
    await problem(await login(client, headers={"X-Forwarded-For": "203.0.113.99"}), 429)
    # ...the owner's own address is not.
    await token(client)


async def test_changing_the_password_revokes_every_other_token_and_the_old_password(
    client: Client, owner: str
) -> None:
    laptop = await token(client)
    me = bearer(owner)
    change = {"current_password": PASSWORD, "new_password": NEW_PASSWORD}
    short = await client.post(
        "/v1/me/password", json={**change, "new_password": "short"}, headers=me
    )
    errors = (await problem(short, 422))["errors"]
    assert [e["field"] for e in errors] == ["new_password"]
    wrong = await client.post(
        "/v1/me/password", json={**change, "current_password": "not it at all"}, headers=me
    )
    await problem(wrong, 401)
    assert (await client.post("/v1/me/password", json=change, headers=me)).status == 204
    assert (await client.get("/v1/me", headers=me)).status == 200  # this one kept
    await problem(await client.get("/v1/me", headers=bearer(laptop)), 401)  # revoked
    await problem(await login(client, headers=HOME), 401)  # the old password
    await token(client, password=NEW_PASSWORD)


async def test_wrong_current_passwords_count_as_failed_logins(client: Client, owner: str) -> None:
    me = bearer(owner)
    change = {"current_password": "not it at all", "new_password": NEW_PASSWORD}
    statuses = [
        (await client.post("/v1/me/password", json=change, headers={**me, **HOME})).status
        for _ in range(MAX_FAILURES + 1)
    ]
    assert statuses == [401] * MAX_FAILURES + [429]
    await problem(await login(client, headers=HOME), 429)  # this address, this email


async def test_tokens_are_listed_without_secrets_and_revoked_one_by_one(
    client: Client, owner: str
) -> None:
    laptop = await token(client)
    listed = await client.get("/v1/tokens", headers=bearer(owner))
    assert listed.status == 200
    text = await listed.text()
    assert owner not in text and laptop not in text
    items = (await listed.json())["items"]
    assert [item["current"] for item in items] == [False, True] or [
        item["current"] for item in items
    ] == [True, False]
    assert all(set(item) == {"id", "created_at", "expires_at", "current"} for item in items)
    [other] = [item["id"] for item in items if not item["current"]]
    # Another user cannot revoke it: 404, as for an id nobody has.
    body = {"email": "bob@example.org", "password": PASSWORD}
    assert (await client.post("/v1/users", json=body)).status == 201
    bob = (await (await client.post("/v1/tokens", json=body)).json())["token"]
    await problem(await client.delete(f"/v1/tokens/{other}", headers=bearer(bob)), 404)
    await problem(await client.delete("/v1/tokens/" + "0" * 24, headers=bearer(owner)), 404)
    assert (await client.get("/v1/me", headers=bearer(laptop))).status == 200
    assert (await client.delete(f"/v1/tokens/{other}", headers=bearer(owner))).status == 204
    await problem(await client.get("/v1/me", headers=bearer(laptop)), 401)
    left = (await (await client.get("/v1/tokens", headers=bearer(owner))).json())["items"]
    assert [item["current"] for item in left] == [True]
    await problem(await client.delete(f"/v1/tokens/{other}", headers=bearer(owner)), 404)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_with_redis_down_each_process_keeps_both_windows_and_the_known_clients() -> None:
    gone = aioredis.Redis(port=free_port(), retry=Retry(NoBackoff(), retries=0))
    logins = AccountLogins(gone, Keys("test"), clock := Clock())
    try:
        await logins.succeeded(await logins.attempt(OWNER, "192.0.2.10"))  # home
        for n in range(EMAIL_MAX_FAILURES // MAX_FAILURES):
            for _ in range(MAX_FAILURES):
                await logins.failed(await logins.attempt(OWNER, f"198.51.100.{n}"))
        with pytest.raises(TooManyRequests, match="from this address"):
            await logins.attempt(OWNER, "198.51.100.0")
        with pytest.raises(TooManyRequests, match="slowed down"):
            await logins.attempt(OWNER, "203.0.113.99")
        await logins.abandon(await logins.attempt(OWNER, "192.0.2.10"))  # home passes
        clock.now += EMAIL_WINDOW_SECONDS
        await logins.abandon(await logins.attempt(OWNER, "203.0.113.99"))  # the hour moved
    finally:
        await gone.aclose()
