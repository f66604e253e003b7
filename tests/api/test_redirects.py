"""GET/HEAD /{code}: 302 with Location and no-store, 404 and 410 as problems, visits recorded
by GET only, in few transactions (group commit), and flushed at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

from sluice.app.assembly import create_app, open_store
from sluice.app.testing import patience, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.http.keys import LINK_CACHE, LINK_FOLLOWER, VISITS
from sluice.config import Config
from sluice.events import utcnow
from sluice.http.app_keys import STORE
from sluice.http.visitors import visitor_hash
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, problem, stored_events
from tests.link_helpers import CHROME, GOOGLEBOT, add_link, change_link

NO_STORE = "private, no-store"


async def visits(store: Store) -> list[LinkVisited]:
    return [e for e, _ in await stored_events(store) if isinstance(e, LinkVisited)]


def count_visits(store: Store, n: int) -> Callable[[], object]:
    async def stored() -> bool:
        return len(await visits(store)) == n

    stored.__qualname__ = f"{n} visits stored"
    return stored


async def test_a_link_redirects_with_location_and_no_store(client: Client, store: Store) -> None:
    await add_link(store, "abc123", "https://example.org/landing?x=1")
    response = await client.get("/abc123", allow_redirects=False)
    assert response.status == 302
    assert response.headers["Location"] == "https://example.org/landing?x=1"
    assert response.headers["Cache-Control"] == NO_STORE


async def test_head_answers_the_same_and_records_no_visit(client: Client, store: Store) -> None:
    await add_link(store, "abc123", "https://example.org/")
    head = await client.head("/abc123", allow_redirects=False)
    assert head.status == 302
    assert head.headers["Location"] == "https://example.org/"
    assert head.headers["Cache-Control"] == NO_STORE
    get = await client.get("/abc123", allow_redirects=False)
    assert get.status == 302
    for _ in range(3):
        assert (await client.head("/abc123", allow_redirects=False)).status == 302
    await wait_for(count_visits(store, 1), timeout=5)
    assert client.app is not None
    await client.app[VISITS].close()  # everything buffered is committed: still the one GET
    assert len(await visits(store)) == 1


async def test_unknown_codes_are_404_problems(client: Client) -> None:
    for path in ("/nosuch", "/a.b", "/x", "/" + "y" * 65):
        body = await problem(await client.get(path, allow_redirects=False), 404)
        assert body["status"] == 404
    head = await client.head("/nosuch", allow_redirects=False)
    assert head.status == 404
    assert head.headers["Cache-Control"] == NO_STORE
    assert head.content_type == "application/problem+json"


async def test_disabled_and_expired_links_are_410_problems(client: Client, store: Store) -> None:
    await add_link(store, "off123", "https://example.org/", disabled=True)
    await add_link(
        store, "old123", "https://example.org/", expires_at=utcnow() - timedelta(seconds=1)
    )
    soon = utcnow() + timedelta(seconds=patience(1))  # still ahead at the first GET
    await add_link(store, "soon12", "https://example.org/", expires_at=soon)
    assert (await client.get("/soon12", allow_redirects=False)).status == 302
    for code in ("off123", "old123"):
        response = await client.get(f"/{code}", allow_redirects=False)
        await problem(response, 410)
        assert response.headers["Cache-Control"] == NO_STORE
        assert "Location" not in response.headers
        assert (await client.head(f"/{code}", allow_redirects=False)).status == 410

    async def expired() -> bool:  # the cached link expires on time, no event needed
        response = await client.head("/soon12", allow_redirects=False)
        return response.status == 410

    await wait_for(expired, timeout=5)
    await wait_for(count_visits(store, 1), timeout=5)  # the one 302; no visit for a 410


async def test_the_visit_carries_visitor_hash_referrer_host_browser_and_trace(
    client: Client, store: Store, config: Config
) -> None:
    await add_link(store, "abc123", "https://example.org/")
    before = utcnow()
    bot = await client.get(
        "/abc123",
        allow_redirects=False,
        headers={"User-Agent": GOOGLEBOT, "Referer": "https://News.Example.com:8443/a?b=c"},
    )
    human = await client.get(
        "/abc123",
        allow_redirects=False,
        headers={"User-Agent": CHROME, "X-Request-ID": "req-visit-1"},
    )
    assert bot.status == human.status == 302
    await wait_for(count_visits(store, 2), timeout=5)
    [first, second] = await visits(store)
    key = config.visitor_key.encode()
    assert first.code == "abc123"
    assert first.visitor == visitor_hash(key, "127.0.0.1", GOOGLEBOT)
    assert (first.referrer_host, first.browser, first.is_bot) == (
        "news.example.com",
        "Googlebot",
        True,
    )
    assert first.trace_id == bot.headers["X-Trace-Id"]
    assert before <= first.occurred_at <= utcnow()
    assert second.visitor == visitor_hash(key, "127.0.0.1", CHROME) != first.visitor
    assert (second.referrer_host, second.browser, second.is_bot) == (None, "Chrome", False)
    assert second.trace_id == human.headers["X-Trace-Id"] != "req-visit-1"
    payloads = await store.fetchall("SELECT payload FROM events WHERE type = 'LinkVisited'")
    assert all(b"127.0.0.1" not in bytes(p) for (p,) in payloads)  # no raw IP anywhere


async def test_other_routes_are_not_shadowed_by_codes(client: Client, store: Store) -> None:
    await add_link(store, "healthz", "https://example.org/")  # a code no API would take
    assert client.app is not None
    assert await client.app[LINK_CACHE].get("healthz") is not None  # cached, even
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/openapi.json")).status == 200
    response = await client.put("/abc123")  # POST is the password form's (link_passwords)
    assert response.status == 405


async def test_concurrent_redirects_are_committed_in_few_transactions(
    client: Client, store: Store
) -> None:
    await add_link(store, "hot123", "https://example.org/")
    assert client.app is not None
    recorder = client.app[VISITS]
    commits_before = recorder.commits
    responses = await asyncio.gather(
        *(client.get("/hot123", allow_redirects=False) for _ in range(300))
    )
    assert [r.status for r in responses] == [302] * 300
    await wait_for(count_visits(store, 300), timeout=10)
    # Each transaction stamps its events with one created_at: count them in the database too.
    [(stamps,)] = await store.fetchall(
        "SELECT COUNT(DISTINCT created_at) FROM events WHERE type = 'LinkVisited'"
    )

    async def every_commit_counted() -> bool:
        # The recorder counts a commit once it returned: just after its rows are seen.
        return recorder.commits - commits_before == stamps

    await wait_for(every_commit_counted, timeout=5)
    transactions = recorder.commits - commits_before
    assert 1 <= transactions <= 30, transactions


async def test_a_visit_buffered_at_shutdown_is_committed(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    config = make_config(visit_flush_ms=600_000)  # the writer would wait ten minutes
    client = await aiohttp_client(create_app(config))
    assert client.app is not None
    app = client.app
    await add_link(app[STORE], "abc123", "https://example.org/")
    assert (await client.get("/abc123", allow_redirects=False)).status == 302
    assert app[VISITS].buffered == 1
    assert await visits(app[STORE]) == []
    await client.close()

    store = await open_store(config)
    try:
        [visit] = await visits(store)
        assert visit.code == "abc123"
    finally:
        await store.close()


async def test_a_failing_commit_is_retried_and_the_redirect_never_fails(
    client: Client, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_link(store, "abc123", "https://example.org/")
    assert client.app is not None
    assert (await client.get("/abc123", allow_redirects=False)).status == 302  # cached now
    real = store.transaction
    failures = 3

    def flaky() -> object:
        nonlocal failures
        if failures:
            failures -= 1
            raise OSError("disk I/O error")
        return real()

    monkeypatch.setattr(store, "transaction", flaky)
    statuses = [(await client.get("/abc123", allow_redirects=False)).status for _ in range(5)]
    assert statuses == [302] * 5
    await wait_for(count_visits(store, 6), timeout=10)
    assert failures == 0


async def test_repeated_redirects_read_the_database_once(client: Client, store: Store) -> None:
    """After the first miss the link comes from the cache: a row changed without an event
    (no relay runs here) is not seen, proving no per-request read."""
    assert client.app is not None
    # Once following, the follower clears the cache only after a reconnect.
    await asyncio.wait_for(client.app[LINK_FOLLOWER].following.wait(), 5)
    await add_link(store, "abc123", "https://example.org/one")
    for _ in range(5):
        response = await client.get("/abc123", allow_redirects=False)
        assert response.headers["Location"] == "https://example.org/one"
    await change_link(store, "abc123", "https://example.org/two", event=False)
    response = await client.get("/abc123", allow_redirects=False)
    assert response.headers["Location"] == "https://example.org/one"
    assert client.app[LINK_CACHE].misses == 1


async def test_a_cached_link_still_redirects_with_the_database_down_and_others_are_503(
    client: Client, store: Store
) -> None:
    assert client.app is not None
    # The follower clears the cache when it starts following: the link is cached after.
    await asyncio.wait_for(client.app[LINK_FOLLOWER].following.wait(), 5)
    await add_link(store, "abc123", "https://example.org/one")
    # HEAD throughout: a GET answers the same but also hands a visit to the writer, which
    # keeps retrying it with the database closed (tested on its own above).
    assert (await client.head("/abc123", allow_redirects=False)).status == 302  # now cached
    await store.close()  # every read and write now fails
    response = await client.head("/abc123", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (302, "https://example.org/one")
    body = await problem(await client.get("/other1", allow_redirects=False), 503)
    assert "database" in body["detail"]
    head = await client.head("/other1", allow_redirects=False)
    assert head.status == 503
