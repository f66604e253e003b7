"""Two real ``sluice api`` processes follow the links stream: a change (disable, new target)
redirects by the new state on both within a second of being published, a PATCH through
one of them within a second of its answer, and a change missed while Redis was down is
picked up when the follower reconnects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from sluice.app.testing import wait_for
from sluice.builtin.links.keys import LinksKeys
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION, Relay
from tests.link_helpers import add_link, add_user, bearer, change_link

pytestmark = pytest.mark.slow

CODE = "moving"


async def answers(urls: list[str], code: str = CODE) -> list[tuple[int, str | None]]:
    """(status, Location) of HEAD /{code} on every replica (HEAD records no visit), for a
    client that accepts English (for a link's redirect rules)."""
    seen = []
    async with aiohttp.ClientSession(headers={"Accept-Language": "en-GB"}) as http:
        for url in urls:
            async with http.head(f"{url}/{code}", allow_redirects=False) as response:
                seen.append((response.status, response.headers.get("Location")))
    return seen


async def within_a_second(change_seen: Callable[[], Awaitable[bool]]) -> None:
    """Every replica answers by the new state within a second (docs/guides/links.md): a
    promise, not a budget, so not stretched on a loaded machine."""
    await wait_for(change_seen, timeout=1.0, exact=True)


def everywhere(urls: list[str], expected: tuple[int, str | None]) -> Callable[[], object]:
    async def every_replica_answers() -> bool:
        return await answers(urls) == [expected] * len(urls)

    every_replica_answers.__qualname__ = f"every replica answers {expected}"
    return every_replica_answers


async def published(resources: Resources) -> None:
    """Until the relay has published every committed event."""

    async def relay_caught_up() -> bool:
        head = await resources.store.max_seq()
        return await resources.store.position(POSITION) >= head

    await wait_for(relay_caught_up, interval=0.005)


async def test_a_change_reaches_every_replica_within_a_second(
    resources: Resources, start_relay: Callable[..., Relay], replicas: list[str]
) -> None:
    start_relay()
    await add_link(resources.store, CODE, "https://example.org/first")
    await published(resources)
    # Both replicas cache the link (and, once their follower reads, see every change).
    await wait_for(everywhere(replicas, (302, "https://example.org/first")))

    await change_link(resources.store, CODE, "https://example.org/first", disabled=True)
    await published(resources)
    await within_a_second(everywhere(replicas, (410, None)))

    await change_link(resources.store, CODE, "https://example.org/second")
    await published(resources)
    await within_a_second(everywhere(replicas, (302, "https://example.org/second")))


async def test_a_patch_through_one_api_redirects_by_the_new_state_everywhere_within_a_second(
    resources: Resources, start_relay: Callable[..., Relay], replicas: list[str]
) -> None:
    """docs/reference/http-api.md from the user's side: the second starts when the PATCH is
    answered, so it covers the commit, the relay's publish and both followers."""
    start_relay()
    await add_user(resources.store)
    await add_link(resources.store, CODE, "https://example.org/first")
    await published(resources)
    await wait_for(everywhere(replicas, (302, "https://example.org/first")))

    async def patch(change: dict[str, object]) -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.patch(f"{replicas[0]}/v1/links/{CODE}", json=change, headers=bearer()) as r,
        ):
            assert r.status == 200, await r.text()

    await patch({"url": "https://example.org/second"})
    await within_a_second(everywhere(replicas, (302, "https://example.org/second")))
    await patch({"disabled": True})
    await within_a_second(everywhere(replicas, (410, None)))
    await patch({"disabled": False})
    await within_a_second(everywhere(replicas, (302, "https://example.org/second")))
    await patch({"rules": [{"when": {"language": "en"}, "url": "https://example.org/en"}]})
    await within_a_second(everywhere(replicas, (302, "https://example.org/en")))
    await patch({"rules": None})
    await within_a_second(everywhere(replicas, (302, "https://example.org/second")))
    # A password: its form (200, no Location) everywhere, and the redirect once removed.
    await patch({"password": "correct horse battery"})
    await within_a_second(everywhere(replicas, (200, None)))
    await patch({"password": None})
    await within_a_second(everywhere(replicas, (302, "https://example.org/second")))


async def test_a_patch_is_seen_everywhere_however_far_behind_the_relay_is(
    resources: Resources, replicas: list[str]
) -> None:
    """No relay runs, as if it were minutes behind on a backlog of visits: the change
    hint each API publishes after its commit is what reaches the other replica."""
    await add_user(resources.store)
    await add_link(resources.store, CODE, "https://example.org/first")
    await wait_for(everywhere(replicas, (302, "https://example.org/first")))
    async with (
        aiohttp.ClientSession() as http,
        http.patch(
            f"{replicas[0]}/v1/links/{CODE}", json={"disabled": True}, headers=bearer()
        ) as r,
    ):
        assert r.status == 200, await r.text()
    # The replica that committed it answers by the new state at once.
    assert (await answers(replicas[:1])) == [(410, None)]
    await within_a_second(everywhere(replicas, (410, None)))


async def test_a_change_missed_during_an_outage_is_seen_after_the_reconnect(
    resources: Resources, redis_server: RedisServer, replicas: list[str]
) -> None:
    """No relay runs: the change below is never published, as if Redis had lost it.
    Only the cache clear after the follower's reconnect can reveal it."""
    await add_link(resources.store, CODE, "https://example.org/first")
    await wait_for(everywhere(replicas, (302, "https://example.org/first")))
    redis_server.stop()
    await change_link(resources.store, CODE, "https://example.org/second", event=False)
    # While Redis is down, nothing tells the replicas: they keep redirecting (302).
    assert await answers(replicas) == [(302, "https://example.org/first")] * 2
    redis_server.start()
    await wait_for(everywhere(replicas, (302, "https://example.org/second")), timeout=10)
    # The change hints flow again too: a PATCH reaches the other replica with no relay.
    channel = LinksKeys(resources.keys.prefix).links_changed_channel()

    async def both_listening() -> bool:
        subscribed: Any = await resources.redis.pubsub_numsub(channel)
        return dict(subscribed).get(channel.encode(), 0) == len(replicas)

    await wait_for(both_listening)
    await add_user(resources.store)
    async with (
        aiohttp.ClientSession() as http,
        http.patch(
            f"{replicas[0]}/v1/links/{CODE}",
            json={"url": "https://example.org/third"},
            headers=bearer(),
        ) as r,
    ):
        assert r.status == 200, await r.text()
    await within_a_second(everywhere(replicas, (302, "https://example.org/third")))
