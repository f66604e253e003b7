"""POST /v1/articles/{id}/views: dedupe per viewer, events with the request's trace id."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from sluice.app.assembly import create_app
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.articles.keys import ArticlesKeys
from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, stored_events


async def post_view(client: Client, article: str, **kwargs: Any) -> bool:
    response = await client.post(f"/v1/articles/{article}/views", **kwargs)
    assert response.status == 202, await response.text()
    body = await response.json()
    assert set(body) == {"counted"}
    counted: bool = body["counted"]
    return counted


async def test_a_viewer_counts_once_per_window(client: Client, store: Store) -> None:
    assert await post_view(client, "a1", json={"viewer": "alice"}) is True
    assert await post_view(client, "a1", json={"viewer": "alice"}) is False
    assert await post_view(client, "a1", json={"viewer": "bob"}) is True
    # Another article is another window.
    assert await post_view(client, "a2", json={"viewer": "alice"}) is True
    events = [event for event, _ in await stored_events(store)]
    assert [(e.article_id, e.viewer) for e in events if isinstance(e, ArticleViewed)] == [
        ("a1", "viewer:alice"),
        ("a1", "viewer:bob"),
        ("a2", "viewer:alice"),
    ]


async def test_the_event_carries_the_request_trace_id(client: Client, store: Store) -> None:
    response = await client.post(
        "/v1/articles/a1/views", json={"viewer": "alice"}, headers={"X-Request-ID": "req-12345678"}
    )
    assert response.status == 202
    trace_id = response.headers["X-Trace-Id"]
    assert len(trace_id) == 32 and trace_id != "req-12345678"  # a client's id is not a trace's
    [(event, stored_trace)] = await stored_events(store)
    assert isinstance(event, ArticleViewed)
    assert event.trace_id == stored_trace == trace_id


async def test_a_generated_trace_id_is_returned_and_stored(client: Client, store: Store) -> None:
    response = await client.post("/v1/articles/a1/views")
    assert response.status == 202
    trace_id = response.headers["X-Trace-Id"]
    assert len(trace_id) == 32 and int(trace_id, 16) >= 0
    [(event, stored_trace)] = await stored_events(store)
    assert event.trace_id == stored_trace == trace_id


async def test_traceparent_gives_the_trace_id(client: Client, store: Store) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"traceparent": f"00-{trace}-00f067aa0ba902b7-01", "X-Request-ID": "other-1234"}
    response = await client.post("/v1/articles/a1/views", headers=headers)
    assert response.headers["X-Trace-Id"] == trace
    [(event, _)] = await stored_events(store)
    assert event.trace_id == trace


async def test_an_unsafe_request_id_is_replaced(client: Client) -> None:
    response = await client.get("/healthz", headers={"X-Request-ID": "bad id\u00e9 with spaces"})
    trace_id = response.headers["X-Trace-Id"]
    assert len(trace_id) == 32 and int(trace_id, 16) >= 0


async def test_anonymous_viewer_is_a_keyed_hash_of_ip_and_user_agent(
    client: Client, store: Store, config: Config
) -> None:
    agent = {"User-Agent": "browser/1.0"}
    assert await post_view(client, "a1", headers=agent) is True
    assert await post_view(client, "a1", headers=agent) is False
    assert await post_view(client, "a1", headers={"User-Agent": "browser/2.0"}) is True
    [(first, _), (second, _)] = await stored_events(store)
    assert isinstance(first, ArticleViewed) and isinstance(second, ArticleViewed)
    expected = hmac.new(
        config.visitor_key.encode(), b"127.0.0.1\nbrowser/1.0", hashlib.sha256
    ).hexdigest()
    assert first.viewer == expected
    assert second.viewer != expected


async def test_dedupe_key_expires_with_the_configured_window(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config], redis: aioredis.Redis
) -> None:
    config = make_config(view_dedupe_seconds=42)
    client = await aiohttp_client(create_app(config))
    assert await post_view(client, "a1", json={"viewer": "alice"}) is True
    digest = hashlib.sha256(b"viewer:alice").hexdigest()[:32]
    ttl = await redis.ttl(ArticlesKeys(config.stream_prefix).view_seen("a1", digest))
    assert 40 <= ttl <= 42
    # Once the window is over (the key gone), the viewer counts again.
    await redis.delete(ArticlesKeys(config.stream_prefix).view_seen("a1", digest))
    assert await post_view(client, "a1", json={"viewer": "alice"}) is True


async def test_views_still_count_with_redis_down(
    client: Client, store: Store, redis_server: RedisServer
) -> None:
    redis_server.stop()
    assert await post_view(client, "a1", json={"viewer": "alice"}) is True
    # No dedupe without Redis: degrade to counting rather than losing views.
    assert await post_view(client, "a1", json={"viewer": "alice"}) is True
    events = [event for event, _ in await stored_events(store)]
    assert [e.article_id for e in events if isinstance(e, ArticleViewed)] == ["a1", "a1"]


async def test_a_failed_commit_is_503_and_releases_the_dedupe_key(
    client: Client, store: Store, config: Config, redis: aioredis.Redis
) -> None:
    await store.close()  # every transaction now fails
    response = await client.post("/v1/articles/a1/views", json={"viewer": "alice"})
    assert response.status == 503
    assert response.content_type == "application/problem+json"
    digest = hashlib.sha256(b"viewer:alice").hexdigest()[:32]
    assert await redis.exists(ArticlesKeys(config.stream_prefix).view_seen("a1", digest)) == 0


async def test_a_body_viewer_never_takes_a_logged_in_users_slot(
    client: Client, store: Store
) -> None:
    """The finding: an anonymous {"viewer": "user:<id>"} took the user's dedupe slot."""
    credentials = {"email": "ada@example.org", "password": "correct horse battery"}
    assert (await client.post("/v1/users", json=credentials)).status == 201
    token = (await (await client.post("/v1/tokens", json=credentials)).json())["token"]
    ada = {"Authorization": f"Bearer {token}"}
    user_id = (await (await client.get("/v1/me", headers=ada)).json())["id"]

    assert await post_view(client, "a1", json={"viewer": f"user:{user_id}"}) is True
    assert await post_view(client, "a1", headers=ada) is True  # her own slot, still free
    assert await post_view(client, "a1", headers=ada) is False
    # And the other way round: her view does not use up a body viewer's slot either.
    assert await post_view(client, "a2", headers=ada) is True
    assert await post_view(client, "a2", json={"viewer": f"user:{user_id}"}) is True
    views = [e for e, _ in await stored_events(store) if isinstance(e, ArticleViewed)]
    assert sorted(e.viewer for e in views if e.article_id == "a1") == [
        f"user:{user_id}",
        f"viewer:user:{user_id}",
    ]
