"""Abuse limits per client address and per process (docs/guides/security.md): logins, registrations
and failed admin authentications per address across replicas; password hashing bounded."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sluice.app.assembly import create_app
from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.errors import Overloaded
from sluice.events import uuid7
from sluice.http.app_keys import PASSWORDS, STORE
from sluice.security import passwords
from tests.api.helpers import AiohttpClient, Client, problem
from tests.link_helpers import add_user, bearer

PASSWORD = "correct horse battery"
ADMIN_TOKEN = "limits-admin-token-0123456789abcdef"
CLAIMANT = "address 192.0.2.1"  # whose share of the hasher a direct hash takes
PROXY = "127.0.0.1/32"  # the test client's address: X-Forwarded-For then names the client


def from_address(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


async def login(client: Client, email: str, password: str = PASSWORD, **headers: str) -> Any:
    body = {"email": email, "password": password}
    return await client.post("/v1/tokens", json=body, headers=headers or None)


async def register(client: Client, email: str, **headers: str) -> Any:
    body = {"email": email, "password": PASSWORD}
    return await client.post("/v1/users", json=body, headers=headers or None)


async def until(holds: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.01)


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every password check run, by the password checked."""
    checked: list[str] = []
    verify = passwords.verify_password

    def counting(password: str, stored: str) -> bool:
        checked.append(password)
        return verify(password, stored)

    monkeypatch.setattr(passwords, "verify_password", counting)
    return checked


async def test_random_email_logins_from_one_address_stop_before_they_cost_a_hash(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config], hashes: list[str]
) -> None:
    """The finding: each unknown email cost a full scrypt, and the limit was per email."""
    client = await aiohttp_client(create_app(make_config(logins_per_client=5)))
    answers = [await login(client, f"nobody{i}@example.org") for i in range(12)]
    assert [a.status for a in answers] == [401] * 5 + [429] * 7
    assert len(hashes) == 5  # the refused ones hashed nothing
    refused = await problem(answers[-1], 429)
    assert "from this address" in refused["detail"]
    # 5 per 900 s: the next login is back within 900 / 5 seconds.
    assert 1 <= int(answers[-1].headers["Retry-After"]) <= 180


async def test_the_address_limits_are_shared_by_replicas(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    config = make_config(logins_per_client=4, admin_failures_per_client=2, admin_token=ADMIN_TOKEN)
    one, two = [await aiohttp_client(create_app(config)) for _ in range(2)]
    statuses = [(await login((one, two)[i % 2], f"x{i}@example.org")).status for i in range(6)]
    assert statuses == [401] * 4 + [429] * 2
    guesses = [one, two, one]
    answers = [
        await c.get("/v1/admin/streams", headers={"Authorization": "Bearer guess"}) for c in guesses
    ]
    assert [a.status for a in answers] == [401, 401, 429]


async def test_with_redis_down_each_process_still_limits_addresses(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config], redis_server: RedisServer
) -> None:
    client = await aiohttp_client(create_app(make_config(logins_per_client=3)))
    redis_server.stop()
    statuses = [(await login(client, f"down{i}@example.org")).status for i in range(5)]
    assert statuses == [401] * 3 + [429] * 2


async def test_registrations_per_address_are_limited_and_invalid_ones_are_free(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(registrations_per_client=2)))
    for _ in range(5):  # refused before any hash: they cost nothing, so they count nothing
        await problem(await client.post("/v1/users", json={"email": "bad", "password": "x"}), 422)
    assert (await register(client, "one@example.org")).status == 201
    assert (await register(client, "two@example.org")).status == 201
    refused = await register(client, "three@example.org")
    await problem(refused, 429)
    assert int(refused.headers["Retry-After"]) >= 1


async def test_forwarded_addresses_count_only_from_a_trusted_proxy(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    direct = await aiohttp_client(create_app(make_config(logins_per_client=1)))
    first = await login(direct, "a@example.org", **from_address("203.0.113.1"))
    second = await login(direct, "b@example.org", **from_address("203.0.113.2"))
    assert (first.status, second.status) == (401, 429)  # the header is ignored: one address

    proxied = await aiohttp_client(
        create_app(make_config(logins_per_client=1, trusted_proxies=PROXY))
    )
    assert (await login(proxied, "a@example.org", **from_address("203.0.113.1"))).status == 401
    assert (await login(proxied, "b@example.org", **from_address("203.0.113.2"))).status == 401
    again = await login(proxied, "c@example.org", **from_address("203.0.113.1"))
    assert again.status == 429
    # What the client writes in front of the proxy's entry changes nothing.
    forged = await login(proxied, "d@example.org", **from_address("198.51.100.9, 203.0.113.2"))
    assert forged.status == 429


async def test_failed_admin_tokens_are_limited_per_address_and_the_right_token_still_passes(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    config = make_config(
        admin_token=ADMIN_TOKEN, admin_failures_per_client=3, trusted_proxies=PROXY
    )
    client = await aiohttp_client(create_app(config))

    async def admin(token: str | None, address: str = "203.0.113.1") -> Any:
        headers = from_address(address)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return await client.get("/v1/admin/streams", headers=headers)

    await problem(await admin(None), 401)  # no token: nothing guessed, nothing counted
    for _ in range(3):
        await problem(await admin("guess"), 401)
    refused = await admin("guess")
    body = await problem(refused, 429)
    assert "admin" in body["detail"] and int(refused.headers["Retry-After"]) >= 1
    assert (await admin(ADMIN_TOKEN)).status == 200  # the right token is never locked out
    await problem(await admin("guess"), 429)  # and passing it opened nothing for guesses
    assert (await admin("guess", address="203.0.113.2")).status == 401  # another address


async def test_wrong_admin_tokens_from_everyone_behind_an_untrusted_proxy_lock_no_operator_out(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    """The finding: 60 wrong admin tokens from one address, and the operator's right one
    from that address got 429 (``too many failed admin authentications``). Behind a proxy
    not in SLUICE_TRUSTED_PROXIES every client has the proxy's address, so anyone could
    lock the operator out of /v1/admin/* and /metrics."""
    client = await aiohttp_client(create_app(make_config(admin_token=ADMIN_TOKEN)))
    wrong, right = bearer("wrong-admin-token"), bearer(ADMIN_TOKEN)
    statuses = [(await client.get("/v1/admin/streams", headers=wrong)).status for _ in range(60)]
    assert statuses == [401] * 10 + [429] * 50  # guessing is still stopped
    for path in ("/v1/admin/streams", "/v1/admin/tasks", "/metrics"):
        response = await client.get(path, headers=right)
        assert response.status == 200, (path, await response.text())
    # DELETE /v1/jobs/{id} takes the admin token too: the right one passes there as well.
    await problem(await client.delete(f"/v1/jobs/{uuid7()}", headers=right), 404)
    await problem(await client.delete(f"/v1/jobs/{uuid7()}", headers=wrong), 429)


async def test_a_user_s_valid_token_passes_where_the_address_ran_out_of_admin_failures(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(admin_failures_per_client=2)))
    assert client.app is not None
    await add_user(client.app[STORE])
    wrong = bearer("neither-a-user-nor-the-admin")
    for _ in range(2):
        await problem(await client.get("/v1/admin/streams", headers=wrong), 401)
    await problem(await client.delete(f"/v1/jobs/{uuid7()}", headers=wrong), 429)
    # A user's token is a random 256-bit string: it passes wherever it is taken...
    assert (await client.get("/v1/me", headers=bearer())).status == 200
    await problem(await client.delete(f"/v1/jobs/{uuid7()}", headers=bearer()), 404)
    # ...and on an admin route it is what it is, a user's (403), not a failure (429).
    await problem(await client.get("/v1/admin/streams", headers=bearer()), 403)


async def test_a_right_password_from_an_address_out_of_logins_waits_like_any_other(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config], hashes: list[str]
) -> None:
    """Decided (docs/guides/security.md, "Who a used-up address still lets in"): the
    per-address login limit holds for a right password too. A
    password is not told right from wrong without the hash the limit spares, and a limit
    that let right passwords through while refusing wrong ones would answer every guess
    (429 wrong, 201 right) without stopping any. The remedy for clients that share an
    address is SLUICE_TRUSTED_PROXIES, which gives each its own."""
    config = make_config(logins_per_client=3, trusted_proxies=PROXY)
    client = await aiohttp_client(create_app(config))
    assert (await register(client, "ada@example.org")).status == 201
    shared, own = from_address("203.0.113.7"), from_address("203.0.113.8")
    for i in range(3):
        assert (await login(client, f"guess{i}@example.org", "wrong", **shared)).status == 401
    checked = len(hashes)
    refused = await login(client, "ada@example.org", **shared)
    await problem(refused, 429)
    assert len(hashes) == checked  # refused before the hash
    assert (await login(client, "ada@example.org", **own)).status == 201


async def test_wrong_admin_tokens_by_the_hundred_get_429_not_401(client: Client) -> None:
    """The finding: 300 wrong admin tokens got 300 401s. Default: 10 per address."""
    guess = {"Authorization": "Bearer wrong-admin-token"}
    statuses = [(await client.get("/metrics", headers=guess)).status for _ in range(30)]
    assert statuses == [401] * 10 + [429] * 20


async def test_password_hashing_beyond_its_bound_and_queue_is_a_fast_503(
    aiohttp_client: AiohttpClient,
    make_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = make_config(password_hash_concurrency=1, password_hash_queue=0)
    client = await aiohttp_client(create_app(config))
    assert (await register(client, "ada@example.org")).status == 201
    assert client.app is not None
    hasher = client.app[PASSWORDS]
    release = threading.Event()
    verify = passwords.verify_password

    def slow(password: str, stored: str) -> bool:
        release.wait(10)
        return verify(password, stored)

    monkeypatch.setattr(passwords, "verify_password", slow)
    first = asyncio.create_task(login(client, "ada@example.org", "wrong password"))
    await until(lambda: hasher.busy == 1)
    started = time.monotonic()
    refused = await login(client, "ada@example.org")
    assert time.monotonic() - started < 1.0
    body = await problem(refused, 503)
    assert "passwords" in body["detail"] and refused.headers["Retry-After"] == "1"
    release.set()
    assert (await first).status == 401
    await until(lambda: hasher.busy == 0)
    # The refused login was no failure of the email: four more wrong ones and then the
    # right one still get their answers (five failures lock it).
    for _ in range(3):
        assert (await login(client, "ada@example.org", "wrong password")).status == 401
    assert (await login(client, "ada@example.org")).status == 201


async def test_a_hash_whose_request_is_gone_keeps_its_slot_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hasher = passwords.PasswordHasher(1)
    release = threading.Event()
    monkeypatch.setattr(passwords, "verify_password", lambda *_: release.wait(10))
    try:
        checking = asyncio.create_task(
            hasher.verify("password", passwords.DUMMY_HASH, claimant=CLAIMANT)
        )
        await until(lambda: hasher.busy == 1)
        checking.cancel()  # the client went away; the thread cannot be stopped
        await asyncio.sleep(0.05)
        assert hasher.busy == 1  # so no second hash runs beside it
        with pytest.raises(Overloaded):
            await hasher.verify("password", passwords.DUMMY_HASH, claimant=CLAIMANT)
        release.set()
        await until(lambda: hasher.busy == 0)
    finally:
        release.set()
        hasher.close()
