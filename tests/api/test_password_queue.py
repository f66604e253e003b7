"""A burst of sign-ups waits for a password-hashing slot instead of failing
(docs/guides/security.md).

Issue 35's finding: ten concurrent ``POST /v1/users`` to one API process, and two got
503, because ``SLUICE_PASSWORD_HASH_CONCURRENCY`` (8) refused the ninth hash at once.
Now a hash beyond the bound waits in a bounded queue (``SLUICE_PASSWORD_HASH_QUEUE``,
each at most ``SLUICE_PASSWORD_HASH_WAIT_SECONDS``), and only what is beyond the queue,
or waited too long, gets 503 with ``Retry-After``; the bound on hashes running at once
stays, and the event loop keeps turning while they run in their threads.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sluice.app.assembly import create_app
from sluice.app.testing import slowdown
from sluice.config import Config
from sluice.errors import Overloaded
from sluice.http.app_keys import PASSWORDS
from sluice.security import passwords
from sluice.security.passwords import ClaimantBusy
from tests.api.helpers import AiohttpClient, LoopLag, problem

PASSWORD = "correct horse battery"
CLAIMANT = "address 192.0.2.1"  # whose share of the hasher a direct hash takes
PROXY = "127.0.0.1/32"  # the client's address: X-Forwarded-For then names each sign-up's own
# A sign-up's worst wait in the queue: 50 hashes of ~50 ms on two cores take about 1.2 s
# on an idle machine; a loaded one (the suite's other workers) can take twice that, and
# the test is about the queue, not about the wait's deadline (tested on its own below).
BURST_WAIT = 20.0
# The event loop while a thousand sign-ups are answered: every hash runs in a thread of
# the hasher's, never on the loop's (asserted directly; the loop's CPU time per sign-up
# was the proxy once, and moved with what else a sign-up does, such as opening Redis
# connections for a burst's rate limits). The ticker's worst delay, measured as the
# listing-cost test measures it (tests/api/test_reminder_listing_cost.py), is
# wall-clock: a thousand requests that arrive in one read are parsed in one turn of the
# loop (0.25-0.45 s here); other processes on a busy machine add to it (1.2 s seen with
# the suite on three workers beside other work, 3.0 s once), so the bound, stretched by
# the machine's load, only catches a loop held for seconds, a wait on the hashes' threads.
LOOP_LAG_MAX = 2.5  # seconds


def sign_up(n: int) -> tuple[dict[str, str], dict[str, str]]:
    """The body and headers of the n-th sign-up, from an address of its own."""
    address = f"198.18.{n // 250}.{n % 250 + 1}"
    return {"email": f"burst{n}@example.org", "password": PASSWORD}, {"X-Forwarded-For": address}


async def test_fifty_concurrent_registrations_on_one_process_are_all_201(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    config = make_config(trusted_proxies=PROXY, password_hash_wait_seconds=BURST_WAIT)
    assert (config.password_hash_concurrency, config.password_hash_queue) == (8, 64)  # defaults
    client = await aiohttp_client(create_app(config))
    assert client.app is not None
    hasher = client.app[PASSWORDS]
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, hasher.busy)
            await asyncio.sleep(0.001)

    watcher = asyncio.create_task(watch())
    answers = await asyncio.gather(
        *(
            client.post("/v1/users", json=body, headers=headers)
            for body, headers in map(sign_up, range(50))
        )
    )
    watcher.cancel()
    assert [a.status for a in answers] == [201] * 50, [await a.text() for a in answers]
    assert most == config.password_hash_concurrency  # the bound held, and was reached
    ids = {(await a.json())["id"] for a in answers}
    assert len(ids) == 50


# A client of its own process: a thousand connections opened first, then every request
# written, then every status line read. Prints the statuses and Retry-After headers.
_BURST = r"""
import asyncio, json, resource, sys

port, count = int(sys.argv[1]), int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))

def request(n):
    body = json.dumps({"email": f"burst{n}@example.org", "password": "correct horse battery"})
    return (
        f"POST /v1/users HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"X-Forwarded-For: 198.18.{n // 250}.{n % 250 + 1}\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()

async def answer(reader):
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    lines = head.split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    body = await reader.read()
    return int(lines[0].split()[1]), headers.get("Retry-After"), body.decode()

async def main():
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(count)]
    for n, (_, writer) in enumerate(connections):
        writer.write(request(n))
    answers = await asyncio.gather(*(answer(reader) for reader, _ in connections))
    print(json.dumps(answers))

asyncio.run(main())
"""


async def test_a_thousand_sign_ups_at_once_get_503_only_beyond_the_queue_and_the_loop_turns(
    aiohttp_client: AiohttpClient,
    make_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hashed_on: list[int] = []  # the thread of each hash
    hash_password = passwords.hash_password

    def recorded(password: str) -> str:
        hashed_on.append(threading.get_ident())
        return hash_password(password)

    monkeypatch.setattr(passwords, "hash_password", recorded)
    config = make_config(
        trusted_proxies=PROXY,
        password_hash_wait_seconds=BURST_WAIT,
        max_connections=2000,
        connections_per_address=2000,  # all through one proxy (docs/guides/behind-a-proxy.md)
    )
    client = await aiohttp_client(create_app(config))
    assert client.app is not None
    async with LoopLag() as lag:
        burst = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _BURST,
            str(client.port),
            "1000",
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(burst.communicate(), 90)
    assert burst.returncode == 0
    answers: list[tuple[int, str | None, str]] = json.loads(out)
    statuses = [status for status, _, _ in answers]
    taken = config.password_hash_concurrency + config.password_hash_queue
    assert set(statuses) == {201, 503}, sorted(set(statuses))
    # Every sign-up that found a running slot or a place in the queue was registered
    # (slots freed during the burst let some later ones in too)...
    assert statuses.count(201) >= taken, statuses.count(201)
    # ...and each refusal is the queue's being full, told to come back in a second.
    for status, retry_after, body in answers:
        if status == 503:
            assert retry_after == "1"
            assert "checking as many passwords as it can" in json.loads(body)["detail"]
    assert len(hashed_on) >= statuses.count(201)  # a hash for each registered
    assert threading.get_ident() not in hashed_on  # none on the event loop's thread
    assert lag.worst < LOOP_LAG_MAX * slowdown(), lag.worst
    assert client.app[PASSWORDS].busy == 0 and client.app[PASSWORDS].waiting == 0


async def test_a_hash_that_waits_past_its_deadline_is_a_503_and_frees_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hasher = passwords.PasswordHasher(1, queue=1, wait=0.2)
    release = threading.Event()
    monkeypatch.setattr(passwords, "verify_password", lambda *_: release.wait(10))
    try:
        running = asyncio.create_task(
            hasher.verify("password", passwords.DUMMY_HASH, claimant=CLAIMANT)
        )
        await _until(lambda: hasher.busy == 1)
        started = time.monotonic()
        with pytest.raises(Overloaded) as waited:
            await hasher.verify("password", passwords.DUMMY_HASH, claimant=CLAIMANT)
        assert 0.2 <= time.monotonic() - started < 2.0
        assert "waited too long" in str(waited.value)
        assert hasher.waiting == 0  # its place in the queue is free again
        release.set()
        assert await running is True
        await _until(lambda: hasher.busy == 0)
    finally:
        release.set()
        hasher.close()


async def test_queued_hashes_run_in_their_order_and_a_gone_waiter_passes_its_slot_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hasher = passwords.PasswordHasher(1, queue=3, wait=10)
    gates = {name: threading.Event() for name in ("first", "gone", "second", "third")}
    ran: list[str] = []

    def verify(password: str, _: str) -> bool:
        ran.append(password)
        return gates[password].wait(10)

    monkeypatch.setattr(passwords, "verify_password", verify)
    try:
        tasks = {
            name: asyncio.create_task(hasher.verify(name, passwords.DUMMY_HASH, claimant=CLAIMANT))
            for name in ("first", "gone", "second", "third")
        }
        await _until(lambda: hasher.busy == 1 and hasher.waiting == 3)
        with pytest.raises(Overloaded):  # the queue is full
            await hasher.verify("fourth", passwords.DUMMY_HASH, claimant=CLAIMANT)
        tasks["gone"].cancel()  # its client went away while it waited
        await _until(lambda: hasher.waiting == 2)
        for name in ("first", "second", "third"):
            gates[name].set()
            assert await tasks[name] is True
        assert ran == ["first", "second", "third"]
        await _until(lambda: hasher.busy == 0)
    finally:
        for gate in gates.values():
            gate.set()
        hasher.close()


async def test_a_registration_beyond_a_full_queue_gets_503_with_retry_after(
    aiohttp_client: AiohttpClient,
    make_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = make_config(password_hash_concurrency=1, password_hash_queue=1, trusted_proxies=PROXY)
    client = await aiohttp_client(create_app(config))
    assert client.app is not None
    hasher = client.app[PASSWORDS]
    release = threading.Event()
    hash_password = passwords.hash_password

    def slow(password: str) -> str:
        release.wait(10)
        return hash_password(password)

    monkeypatch.setattr(passwords, "hash_password", slow)
    # Each from an address of its own: three claimants, none beyond its own share.
    held: list[asyncio.Task[Any]] = [
        asyncio.create_task(client.post("/v1/users", json=body, headers=headers))
        for body, headers in map(sign_up, range(2))
    ]
    await _until(lambda: hasher.busy == 1 and hasher.waiting == 1)
    body, headers = sign_up(2)
    refused = await client.post("/v1/users", json=body, headers=headers)
    await problem(refused, 503)
    assert refused.headers["Retry-After"] == "1"
    release.set()
    assert [(await task).status for task in held] == [201, 201]


async def _until(holds: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.01)


async def test_one_claimant_beyond_its_share_is_refused_429_and_nobody_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hasher = passwords.PasswordHasher(4, queue=8, wait=10, per_claimant=2)
    release = threading.Event()
    monkeypatch.setattr(passwords, "verify_password", lambda *_: release.wait(10))
    flooder, other = "address 198.51.100.66", "address 203.0.113.1"
    try:
        held = [
            asyncio.create_task(hasher.verify("x", passwords.DUMMY_HASH, claimant=flooder))
            for _ in range(2)
        ]
        await _until(lambda: hasher.busy == 2)
        with pytest.raises(ClaimantBusy) as refused:  # its third, at once
            hasher.admit(flooder)
        assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"
        with pytest.raises(ClaimantBusy):
            await hasher.verify("x", passwords.DUMMY_HASH, claimant=flooder)
        # Another claimant's hash runs beside them at once.
        beside = asyncio.create_task(hasher.verify("x", passwords.DUMMY_HASH, claimant=other))
        await _until(lambda: hasher.busy == 3)
        release.set()
        assert await asyncio.gather(*held, beside) == [True] * 3
        await _until(lambda: hasher.busy == 0 and not hasher.held)
    finally:
        release.set()
        hasher.close()


async def test_freed_slots_go_to_the_waiting_claimants_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hasher = passwords.PasswordHasher(1, queue=8, wait=10, per_claimant=4)
    gate = threading.Event()
    ran: list[str] = []

    def verify(password: str, _: str) -> bool:
        ran.append(password)
        return password != "first" or gate.wait(10)

    monkeypatch.setattr(passwords, "verify_password", verify)

    def check(name: str, claimant: str) -> asyncio.Task[bool]:
        return asyncio.create_task(hasher.verify(name, passwords.DUMMY_HASH, claimant=claimant))

    try:
        tasks = [check("first", "address a")]
        await _until(lambda: hasher.busy == 1)
        # One claimant queues three hashes, then two others one each: they do not wait
        # for all three of the first one's.
        for queued, name in enumerate(("a1", "a2", "a3"), 1):
            tasks.append(check(name, "account flood"))
            await _until(lambda: hasher.waiting == queued)  # noqa: B023 (awaited here)
        tasks += [check("b1", "address b"), check("c1", "address c")]
        await _until(lambda: hasher.waiting == 5)
        gate.set()
        assert all(await asyncio.gather(*tasks))
        assert ran == ["first", "a1", "b1", "c1", "a2", "a3"]
        await _until(lambda: hasher.busy == 0 and not hasher.held)
    finally:
        gate.set()
        hasher.close()
