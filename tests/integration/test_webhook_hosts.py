"""Many owners' webhooks on one receiver host, delivered by two real worker processes
(``sluice worker webhooks``): the receiver never sees more than
``SLUICE_WEBHOOK_HOST_CONCURRENCY`` calls at once, every message arrives, and the
entries that waited for the host's turn spent no deliveries: the last ones wait
longer than three batch waits, with three deliveries allowed (a call under way
when its batch's wait ends is charged one, as before; the other worker may then
start the entry's call again). On one Redis and on a Redis Cluster
(docs/guides/links.md, "Webhooks")."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sluice.app.assembly import create_app
from sluice.app.testing import Child, wait_for
from sluice.builtin.links.webhooks.group import NAME
from sluice.config import Config
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.api.helpers import user_token
from tests.integration.webhook_helpers import add_link, add_webhook

pytestmark = [pytest.mark.slow, pytest.mark.topologies("single", "cluster")]

Client = TestClient[Any, Any]
OWNERS, LINKS_EACH, AT_ONCE = 6, 8, 2


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(webhook_allow_private=1, code_pool_target=200)


class Busy:
    """A receiver whose every call takes ``delay`` s: it counts the calls in progress
    and the most it saw at once, and the ``link.created`` codes each owner got."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.inside = 0
        self.most = 0
        self.codes: dict[str, set[str]] = defaultdict(set)

    async def view(self, request: web.Request) -> web.Response:
        self.inside += 1
        self.most = max(self.most, self.inside)
        try:
            body = json.loads(await request.read())
            await asyncio.sleep(self.delay)
            self.codes[request.match_info["name"]].add(body["data"]["code"])
        finally:
            self.inside -= 1
        return web.Response(status=204)


@pytest.fixture
async def busy(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> AsyncIterator[tuple[Busy, str]]:
    receiver = Busy(delay=0.25)
    app = web.Application()
    app.router.add_post("/{name}", receiver.view)
    server = await aiohttp_server(app, host="127.0.0.1")
    yield receiver, f"http://127.0.0.1:{server.port}"


async def test_one_receiver_host_never_gets_more_calls_at_once_than_its_limit(
    aiohttp_client: Callable[..., Awaitable[Client]],
    config: Config,
    busy: tuple[Busy, str],
    resources: Resources,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    receiver, base = busy
    api = await aiohttp_client(create_app(config))
    owners = [await user_token(api, email=f"owner{n}@example.org") for n in range(OWNERS)]
    for n, auth in enumerate(owners):
        await add_webhook(api, auth, f"{base}/owner{n}", "link.created")
    env = {
        "SLUICE_WEBHOOK_ALLOW_PRIVATE": "1",
        "SLUICE_WEBHOOK_HOST_CONCURRENCY": str(AT_ONCE),
        # Waiting for the host is no delivery; a call under way past the batch's wait
        # (1 s) is one (StillSending): five leave room for a loaded machine, while the
        # last of 48 calls made two at a time waits about six seconds for its host.
        "SLUICE_MAX_DELIVERIES": "5",
        "SLUICE_RETRY_BASE_MS": "50",
    }
    start_relay()
    for name in ("w1", "w2"):
        spawn("worker", NAME, "--consumer", name, **env)
    codes: dict[str, set[str]] = defaultdict(set)
    for _ in range(LINKS_EACH):
        for n, auth in enumerate(owners):
            codes[f"owner{n}"].add(await add_link(api, auth))

    async def all_delivered() -> bool:
        return receiver.codes == codes

    await wait_for(all_delivered, timeout=120)
    assert receiver.most == AT_ONCE, f"most calls at once: {receiver.most}"
    keys, partitions = resources.keys, resources.config.partitions
    dead = [
        entry[1][b"error"]
        for p in range(partitions)
        for entry in await resources.redis.xrange(keys.dead(NAME, p))
    ]
    assert dead == [], "an entry that only waited for its host was dead-lettered"
