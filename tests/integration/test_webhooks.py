"""Webhooks end to end: the API, the relay, the ``webhooks`` group and real local
receivers (aiohttp servers on 127.0.0.1, so SLUICE_WEBHOOK_ALLOW_PRIVATE=1 but for
the address checks). Signatures are verified with the ``standardwebhooks`` package."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestClient, TestServer
from standardwebhooks.webhooks import Webhook as Verifier

from sluice.app.assembly import create_app
from sluice.app.running import group_spec
from sluice.app.testing import Child, wait_for
from sluice.builtin.links.events import LinkUpdated
from sluice.builtin.links.webhooks import repository
from sluice.builtin.links.webhooks.group import NAME, WebhookDeps, build_deps, webhooks_group
from sluice.builtin.links.webhooks.repository import Webhook
from sluice.builtin.links.webhooks.sender import Sender
from sluice.builtin.links.webhooks.signing import generate_secret
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.events import utcnow, uuid7
from sluice.process.resources import Resources
from sluice.store.users import db_time
from tests.api.helpers import user_token
from tests.integration.webhook_helpers import add_link, add_webhook

Client = TestClient[Any, Any]
Call = tuple[dict[str, str], bytes]


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(
        webhook_allow_private=1,
        webhook_timeout_seconds=5.0,
        webhook_batch_wait_ms=1000,
        max_deliveries=3,
        retry_base_ms=50,
        code_pool_target=200,
    )


class Receiver:
    """Endpoints by name: ``fail*`` answer 500, ``slow*`` wait for ``release``."""

    def __init__(self) -> None:
        self.calls: dict[str, list[Call]] = defaultdict(list)
        self.release = asyncio.Event()
        self.delay = 0.0  # seconds every call takes before its answer

    async def view(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.calls[name].append(
            ({k.lower(): v for k, v in request.headers.items()}, await request.read())
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        if name.startswith("fail"):
            return web.Response(status=500)
        if name.startswith("slow"):
            await self.release.wait()
        return web.Response(status=204)


@pytest.fixture
async def receiver(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> AsyncIterator[tuple[Receiver, str]]:
    hooks = Receiver()
    app = web.Application()
    app.router.add_post("/{name}", hooks.view)
    server = await aiohttp_server(app, host="127.0.0.1")
    yield hooks, f"http://127.0.0.1:{server.port}"
    hooks.release.set()


@pytest.fixture
async def api(aiohttp_client: Callable[..., Awaitable[Client]], config: Config) -> Client:
    return await aiohttp_client(create_app(config))


@pytest.fixture
async def deps(resources: Resources) -> AsyncIterator[WebhookDeps]:
    made = build_deps(resources)
    yield made
    await made.sender.close()


@pytest.fixture
def worker(
    start_relay: Callable[..., Any], start_worker: Callable[..., Consumer], resources: Resources
) -> Callable[[WebhookDeps], Consumer]:
    def start(deps: WebhookDeps) -> Consumer:
        start_relay()
        return start_worker(NAME, spec=group_spec(webhooks_group, resources, deps))

    return start


def verified(secret: str, call: Call) -> dict[str, Any]:
    headers, body = call
    payload: dict[str, Any] = Verifier(secret).verify(body, headers)
    assert payload["version"] == 1
    return payload


async def test_link_created_and_visits_in_signed_batches(
    api: Client,
    receiver: tuple[Receiver, str],
    deps: WebhookDeps,
    worker: Any,
    resources: Resources,
) -> None:
    hooks, base = receiver
    ada = await user_token(api)
    hook = await add_webhook(
        api, ada, f"{base}/ada", "link.created", "link.updated", "link.visited"
    )
    worker(deps)
    code = await add_link(api, ada)
    owner = (await (await api.get("/v1/me", headers=ada)).json())["id"]
    async with resources.store.transaction() as tx:  # as PATCH /v1/links/{code} appends it
        await tx.append(LinkUpdated(code=code, owner_id=owner, url="https://example.org/b"))
    for _ in range(150):
        assert (await api.get(f"/{code}", allow_redirects=False)).status == 302

    def visits() -> list[dict[str, Any]]:
        payloads = [verified(hook["secret"], call) for call in hooks.calls["ada"]]
        batches = [p["data"]["visits"] for p in payloads if p["type"] == "link.visited"]
        assert all(1 <= len(batch) <= 100 for batch in batches)
        return [visit for batch in batches for visit in batch]

    async def everything() -> bool:
        types = {verified(hook["secret"], c)["type"] for c in hooks.calls["ada"]}
        return len({v["event_id"] for v in visits()}) == 150 and "link.updated" in types

    await wait_for(everything)
    created = [verified(hook["secret"], c) for c in hooks.calls["ada"]]
    assert [p["data"]["code"] for p in created if p["type"] == "link.created"] == [code]
    changes = [p["data"]["url"] for p in created if p["type"] == "link.updated"]
    assert changes == ["https://example.org/b"]
    assert {v["code"] for v in visits()} == {code}
    # What the visit knows of its client (a loopback address has no country).
    assert all(v["country"] is None and "os" in v and "device" in v for v in visits())
    items: list[dict[str, Any]] = []

    async def each_call_recorded() -> bool:
        # A call's attempt is written after its answer came: the receiver sees it first.
        answer = await api.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=ada)
        items[:] = (await answer.json())["items"]
        return len(items) == len(hooks.calls["ada"])

    await wait_for(each_call_recorded)
    assert {i["event_type"] for i in items} == {"link.created", "link.updated", "link.visited"}
    assert all(i["status"] == 204 and i["error"] is None for i in items)


async def test_a_failing_endpoint_is_retried_then_dead_lettered(
    api: Client,
    receiver: tuple[Receiver, str],
    deps: WebhookDeps,
    worker: Any,
    resources: Resources,
) -> None:
    hooks, base = receiver
    ada = await user_token(api)
    hook = await add_webhook(api, ada, f"{base}/fail", "link.created")
    worker(deps)
    await add_link(api, ada)
    dead = resources.keys.dead(NAME)

    async def dead_lettered() -> bool:
        return await resources.redis.xlen(dead) == 1

    await wait_for(dead_lettered)
    assert len(hooks.calls["fail"]) == 3  # SLUICE_MAX_DELIVERIES
    assert len({headers["webhook-id"] for headers, _ in hooks.calls["fail"]}) == 1
    answer = await api.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=ada)
    items = (await answer.json())["items"]
    assert [(i["attempt"], i["status"]) for i in items] == [(3, 500), (2, 500), (1, 500)]


async def test_a_slow_endpoint_does_not_delay_another_owner(
    api: Client, receiver: tuple[Receiver, str], deps: WebhookDeps, worker: Any
) -> None:
    hooks, base = receiver
    ada = await user_token(api)
    bob = await user_token(api, email="bob@example.org")
    slow = await add_webhook(api, ada, f"{base}/slow", "link.created")
    await add_webhook(api, bob, f"{base}/fast", "link.created")
    worker(deps)
    await add_link(api, ada)

    async def slow_called() -> bool:
        return bool(hooks.calls["slow"])

    await wait_for(slow_called)
    started = time.monotonic()
    await add_link(api, bob)

    async def fast_called() -> bool:
        return bool(hooks.calls["fast"])

    await wait_for(fast_called, timeout=3)
    assert not hooks.release.is_set()  # the slow call is still held
    assert time.monotonic() - started < 3
    hooks.release.set()

    async def slow_delivered() -> bool:
        rows = await repository.attempts(deps.store, slow["id"], 10)
        return any(r.status == 204 for r in rows)

    await wait_for(slow_delivered)
    # A retry of the held entry resent (if at all) the very same message.
    assert len({headers["webhook-id"] for headers, _ in hooks.calls["slow"]}) == 1


class Names(AbstractResolver):
    """Resolves ``hooks.example.test`` to 127.0.0.1, as a rebinding DNS could."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != "hooks.example.test":
            raise OSError(f"unknown host {host}")
        return [
            {
                "hostname": host,
                "host": "127.0.0.1",
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("host", ["hooks.example.test", "localhost"])
async def test_private_targets_are_refused_at_delivery(
    api: Client, receiver: tuple[Receiver, str], resources: Resources, worker: Any, host: str
) -> None:
    hooks, base = receiver
    port = base.rpartition(":")[2]
    ada = await user_token(api)
    owner = (await (await api.get("/v1/me", headers=ada)).json())["id"]
    hook = Webhook(
        id=uuid7(),
        owner_id=owner,
        url=f"http://{host}:{port}/ssrf",
        events=("link.created",),
        secret=generate_secret(),
        created_at=db_time(utcnow()),
    )
    async with resources.store.transaction() as tx:  # a name passes the creation checks
        await repository.insert(tx, hook)
    sender = Sender(resources.store, 5.0, allow_private=False, resolver=Names)
    deps = WebhookDeps(store=resources.store, sender=sender, wait_s=1.0, retention_s=3600)
    try:
        worker(deps)
        await add_link(api, ada)

        async def dead_lettered() -> bool:
            return await resources.redis.xlen(resources.keys.dead(NAME)) == 1

        await wait_for(dead_lettered)  # at once: a refused target is permanent
    finally:
        await sender.close()
    assert not hooks.calls["ssrf"]
    answer = await api.get(f"/v1/webhooks/{hook.id}/deliveries", headers=ada)
    items = (await answer.json())["items"]
    assert items and all(i["status"] is None and "non-public" in i["error"] for i in items)
    # The owner learns that the target is not public, never where the name points
    # (docs/guides/webhooks.md): an internal DNS answer stays with the operator's log.
    said = {
        "hooks.example.test": "hooks.example.test resolves to a non-public address",
        "localhost": "localhost is a private, loopback or otherwise non-public address",
    }[host]
    assert all(i["error"] == said and "127.0.0.1" not in i["error"] for i in items), [
        i["error"] for i in items
    ]
    dead: Any = await resources.redis.xrange(resources.keys.dead(NAME))
    assert b"TargetRefused" in dead[0][1][b"error"]
    assert json.loads(dead[0][1][b"data"])["type"] == "LinkCreated"


async def test_visit_batches_are_complete_and_exact_under_kill_9_of_the_worker(
    api: Client,
    receiver: tuple[Receiver, str],
    resources: Resources,
    start_relay: Callable[..., Any],
    spawn: Callable[..., Child],
) -> None:
    """A real ``sluice worker webhooks`` killed with SIGKILL while it delivers: the next
    worker sends what was missing, and a receiver that drops a ``webhook-id`` it has seen
    (as Standard Webhooks advises) gets every visit exactly once."""
    hooks, base = receiver
    hooks.delay = 0.02  # a call takes a moment: the kill lands while messages are out
    ada = await user_token(api)
    hook = await add_webhook(api, ada, f"{base}/ada", "link.visited")
    code = await add_link(api, ada)
    start_relay()
    env = {"SLUICE_WEBHOOK_ALLOW_PRIVATE": "1", "SLUICE_WORKER_BATCH": "50"}
    first = spawn("worker", NAME, "--consumer", "w1", **env)
    for _ in range(400):
        assert (await api.get(f"/{code}", allow_redirects=False)).status == 302

    def messages() -> dict[str, set[str]]:
        """The visits of each message received, by its webhook-id (all copies alike)."""
        found: dict[str, set[str]] = {}
        for call in hooks.calls["ada"]:
            visits = {v["event_id"] for v in verified(hook["secret"], call)["data"]["visits"]}
            assert found.setdefault(call[0]["webhook-id"], visits) == visits
        return found

    async def some_sent() -> bool:
        return len(messages()) >= 2

    await wait_for(some_sent, timeout=30)
    first.kill()
    sent_before = sum(len(v) for v in messages().values())
    spawn("worker", NAME, "--consumer", "w2", **env)

    async def all_stored() -> bool:  # the API's writer commits visits in the background
        return len(await resources.store.events_after(0, 10_000, types=("LinkVisited",))) == 400

    await wait_for(all_stored, timeout=30)
    stored = await resources.store.events_after(0, 10_000, types=("LinkVisited",))

    async def complete() -> bool:
        return len(set().union(*messages().values())) == 400

    await wait_for(complete, timeout=60)
    by_id = messages()
    assert set().union(*by_id.values()) == {event.event_id for event in stored}
    assert sum(len(v) for v in by_id.values()) == 400, "a visit in two different messages"
    assert sent_before < 400, "the worker had sent everything before the kill: nothing tested"


async def test_a_worker_that_delivered_closes_its_http_client_when_it_stops(
    api: Client,
    receiver: tuple[Receiver, str],
    start_relay: Callable[..., Any],
    spawn: Callable[..., Child],
    tmp_path: Path,
) -> None:
    """A ``sluice worker webhooks`` stopped with SIGTERM after a call ends cleanly: no
    "Unclosed client session" (or connector) left for the garbage collector to report."""
    hooks, base = receiver
    ada = await user_token(api)
    await add_webhook(api, ada, f"{base}/ada", "link.created")
    start_relay()
    log = tmp_path / "worker.log"
    worker = spawn("worker", NAME, log=log, SLUICE_WEBHOOK_ALLOW_PRIVATE="1")
    await add_link(api, ada)

    async def delivered() -> bool:
        return len(hooks.calls["ada"]) == 1

    await wait_for(delivered, timeout=30)
    assert worker.terminate() == 0
    lines = log.read_text().splitlines()
    assert not [line for line in lines if "Unclosed" in line], lines
