"""SLUICE_TRACE_URL through the admin API (docs/guides/tracing.md, "From /admin to your
tracing UI"): a trace's story and an event's carry the trace's link, filled in; none
without the setting; a malformed one stops a process at start, naming it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sluice.app.assembly import create_app
from sluice.app.testing import sluice_command
from sluice.builtin.articles.events import ArticleViewed
from sluice.config import Config
from sluice.process.resources import Resources

pytestmark = pytest.mark.topologies("single")

TOKEN = "trace-links-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
TEMPLATE = "http://localhost:16686/trace/{trace_id}?from=sluice"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
Client = TestClient[Any, Any]


async def _stories(client: Client, resources: Resources, trace_id: str) -> tuple[Any, Any]:
    async with resources.store.transaction() as tx:
        event = ArticleViewed(article_id="launch", viewer="ada", trace_id=trace_id)
        await tx.append(event)
    trace = await client.get(f"/v1/admin/traces/{trace_id}", headers=ADMIN)
    one = await client.get(f"/v1/admin/events/{event.event_id}", headers=ADMIN)
    assert (trace.status, one.status) == (200, 200), await trace.text()
    return await trace.json(), await one.json()


async def test_a_traces_story_and_its_events_link_to_the_tracing_ui(
    make_config: Callable[..., Config],
    aiohttp_client: Callable[..., Awaitable[Client]],
    resources: Resources,
) -> None:
    client = await aiohttp_client(create_app(make_config(admin_token=TOKEN, trace_url=TEMPLATE)))
    trace, event = await _stories(client, resources, TRACE)
    link = f"http://localhost:16686/trace/{TRACE}?from=sluice"
    assert trace["trace_url"] == link
    assert [e["trace_url"] for e in trace["events"]] == [link]
    assert event["trace_url"] == link
    # A trace id of the caller's own kind, URL-encoded where it goes.
    trace, _ = await _stories(client, resources, "checkout:4f2a9c")
    assert trace["trace_url"] == "http://localhost:16686/trace/checkout%3A4f2a9c?from=sluice"


async def test_without_the_setting_no_link_is_given(
    make_config: Callable[..., Config],
    aiohttp_client: Callable[..., Awaitable[Client]],
    resources: Resources,
) -> None:
    client = await aiohttp_client(create_app(make_config(admin_token=TOKEN)))
    trace, event = await _stories(client, resources, TRACE)
    assert trace["trace_url"] is None and event["trace_url"] is None
    assert trace["events"][0]["trace_url"] is None


async def test_a_malformed_template_stops_a_process_at_start_naming_it(config: Config) -> None:
    done = await sluice_command(
        config, "migrate", timeout=90.0, SLUICE_TRACE_URL="localhost:16686/trace/{trace_id}"
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "SLUICE_TRACE_URL must be an http:// or https:// URL containing {trace_id}" in (
        done.stderr
    )
