"""``GET /metrics``: admin only, Prometheus text, counters that move with the traffic,
including the counters of other sluice processes (multiprocess mode)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.app.assembly import create_app
from sluice.app.testing import Child, wait_for
from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.telemetry import prometheus
from sluice.telemetry.metrics_dir import ENV, metrics_dir
from tests.integration.helpers import post_views, views
from tests.integration.metrics_helpers import ADMIN, ADMIN_TOKEN, scrape, value


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=ADMIN_TOKEN)


async def test_metrics_need_the_admin_token(
    aiohttp_client: Callable[..., Awaitable[Any]], config: Config
) -> None:
    client = await aiohttp_client(create_app(config))
    assert (await client.get("/metrics")).status == 401
    assert (await client.get("/metrics", headers={"Authorization": "Bearer no"})).status == 401


async def test_counters_move_with_the_traffic_and_redis_down_still_answers(
    aiohttp_client: Callable[..., Awaitable[Any]], config: Config, redis_server: RedisServer
) -> None:
    client = await aiohttp_client(create_app(config))
    before = await scrape(client)
    assert value(before, "sluice_redis_up") == 1
    for i in range(3):
        user = {"email": f"u{i}@example.org", "password": "correct horse"}
        assert (await client.post("/v1/users", json=user)).status == 201
    after = await scrape(client)
    committed = "sluice_events_committed_total"
    assert value(after, committed, type="UserRegistered") == (
        value(before, committed, type="UserRegistered") + 3
    )
    # Not relayed yet: the relay backlog shows them.
    assert value(after, "sluice_relay_backlog") == 3
    # Redirects: requests by route pattern, visits recorded, cache hits.
    login = await client.post(
        "/v1/tokens", json={"email": "u0@example.org", "password": "correct horse"}
    )
    auth = {"Authorization": f"Bearer {(await login.json())['token']}"}
    link = await client.post("/v1/links", json={"url": "https://example.org/"}, headers=auth)
    code = (await link.json())["code"]
    for _ in range(5):
        assert (await client.get(f"/{code}", allow_redirects=False)).status == 302
    redirects = value(
        after, "sluice_http_requests_total", method="GET", route="/{code}", status="302"
    )

    async def published() -> bool:
        now = await scrape(client)
        return value(now, "sluice_visits_recorded_total") >= (
            value(after, "sluice_visits_recorded_total") + 5
        )

    await wait_for(published, timeout=10)
    moved = await scrape(client)
    assert (
        value(moved, "sluice_http_requests_total", method="GET", route="/{code}", status="302")
        == redirects + 5
    )
    assert (
        value(moved, "sluice_http_request_duration_seconds_count", method="GET", route="/{code}")
        >= 5
    )
    hits = value(moved, "sluice_link_cache_lookups_total", result="hit")
    assert hits >= value(after, "sluice_link_cache_lookups_total", result="hit") + 4
    redis_server.stop()
    down = await scrape(client)
    assert value(down, "sluice_redis_up") == 0
    assert value(down, committed, type="UserRegistered") >= 3


async def test_one_scrape_adds_up_the_counters_of_every_process(
    aiohttp_client: Callable[..., Awaitable[Any]],
    config: Config,
    resources: Resources,
    spawn: Callable[..., Child],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spawn("relay")
    spawn("worker", "article-views")
    await post_views(resources, "metered", 40)

    async def counted() -> bool:
        return await views(resources, "metered") == 40

    await wait_for(counted, timeout=30)
    # This API reads the files the relay and worker processes write.
    monkeypatch.setenv(ENV, str(metrics_dir(config)))
    client = await aiohttp_client(create_app(config))

    async def flushed() -> bool:
        samples = await scrape(client)
        return value(samples, "sluice_handled_entries_total", group="article-views") == 40

    await wait_for(flushed, timeout=10)
    samples = await scrape(client)
    assert value(samples, "sluice_relay_published_events_total") >= 40
    assert value(samples, "sluice_handler_batch_duration_seconds_count", group="article-views") >= 1
    assert value(samples, "sluice_group_lag", stream="sluice:articles", group="article-views") == 0
    assert (
        value(samples, "sluice_group_pending", stream="sluice:articles", group="article-views") == 0
    )


async def test_every_family_a_scrape_shows_is_declared_as_shown(
    aiohttp_client: Callable[..., Awaitable[Any]], config: Config
) -> None:
    """What the metrics reference lists (``sluice.telemetry.prometheus.declared``) is what /metrics
    shows: a metric made without declaring it would be missing from the page."""
    client = await aiohttp_client(create_app(config))
    user = {"email": "declared@example.org", "password": "correct horse"}
    assert (await client.post("/v1/users", json=user)).status == 201
    response = await client.get("/metrics", headers=ADMIN)
    shown = [
        family
        for family in text_string_to_metric_families(await response.text())
        if family.name.startswith("sluice_")
    ]
    declared = {d.name: d for d in prometheus.declared()}
    # In one process (not the multiprocess mode of the deployment) prometheus-client
    # also shows each counter's and histogram's creation time as a gauge of its own.
    created = {f"{d.name}_created" for d in declared.values() if d.kind != "gauge"}
    shown = [family for family in shown if family.name not in created]
    assert len(shown) >= 30
    for family in shown:
        assert family.name in declared, f"{family.name} is shown but not declared"
        described = declared[family.name]
        assert (family.type, family.documentation) == (described.kind, described.documentation)
        for sample in family.samples:
            assert set(sample.labels) - {"le"} <= set(described.labels), sample
    assert any(family.samples and family.name == "sluice_events_committed" for family in shown)
