"""The operations panels of /admin in headless Chromium (docs/guides/operate.md): the event search
with one event's deliveries and its trace, pause and resume, bulk redrive, stalled consumers,
cancelling a job, the per-group charts.

Real store, Redis, relay and workers, as ``test_dashboard.py``.
``SLUICE_UPDATE_SCREENSHOT=1`` also copies the event and trace panels' screenshot to
docs/assets/admin-trace.png (the operations guide shows it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sluice.app.assembly import create_app, default_apps
from sluice.app.testing import wait_for
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.links.exports import jobs
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.records.pause import paused_groups
from sluice.relay.relay import Relay
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from tests.browser.admin_page import ADMIN_TOKEN, WAIT_MS, broken_for, sign_in
from tests.integration.helpers import post_views, views
from tests.link_helpers import OWNER, add_link, add_user

if TYPE_CHECKING:
    from playwright.async_api import Page

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "assets" / "admin-trace.png"
TRACE = "checkout-4f2a9c"


@pytest.fixture
def ops_config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=ADMIN_TOKEN, max_deliveries=2, retry_base_ms=20, stall_seconds=1)


@pytest.fixture
async def ops_url(aiohttp_server: Any, ops_config: Config) -> str:
    server = await aiohttp_server(create_app(ops_config))
    return str(server.make_url("/admin"))


async def traced_views(resources: Resources, trace_id: str, *articles: str) -> list[str]:
    """One view of each article under ``trace_id``, one transaction each; their event ids."""
    ids = []
    for article in articles:
        async with resources.store.transaction() as tx:
            event = ArticleViewed(article_id=article, viewer="checkout", trace_id=trace_id)
            await tx.append(event)
        ids.append(event.event_id)
    return ids


async def test_an_event_is_found_and_shows_its_deliveries_and_its_trace(
    page: Page,
    ops_url: str,
    ops_config: Config,
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    tmp_path: Path,
) -> None:
    from playwright.async_api import expect

    start_relay()
    start_worker(spec=broken_for(resources, "launch-post", {"on": True}), config=ops_config)
    await post_views(resources, "home", 60)
    home_id, launch_id = await traced_views(resources, TRACE, "home", "launch-post")

    async def dead_lettered() -> bool:
        return await resources.redis.xlen(resources.keys.dead("article-views")) == 1

    await wait_for(dead_lettered)

    await sign_in(page, ops_url, ADMIN_TOKEN)
    # A page at a time: 50 of the 62 events, then the rest.
    await page.get_by_label("Type", exact=True).fill("ArticleViewed")
    await page.get_by_role("button", name="Search").click()
    events = page.locator("#events tbody tr")
    await expect(events).to_have_count(50)
    await expect(page.locator("#ev-summary")).to_contain_text("50 events shown; more follow")
    await page.get_by_role("button", name="More events").click()
    await expect(events).to_have_count(62)
    await expect(page.get_by_role("button", name="More events")).to_be_hidden()

    # By trace id: the two events of the request, newest first.
    await page.get_by_label("Type", exact=True).fill("")
    await page.get_by_label("Trace id").fill(TRACE)
    await page.get_by_role("button", name="Search").click()
    await expect(events).to_have_count(2)
    await expect(events.first).to_contain_text(launch_id)

    # Its detail: the payload, and both attempts, the second dead-lettered.
    await events.filter(has_text=launch_id).locator("td").first.click()
    detail = page.locator("#event-panel")
    await expect(detail).to_be_visible()
    await expect(detail.locator("#event-payload")).to_contain_text('"article_id": "launch-post"')
    attempts = detail.locator("#event-deliveries tbody tr")
    await expect(attempts).to_have_count(2)
    await expect(attempts.nth(0)).to_contain_text("failed")
    await expect(attempts.nth(1)).to_contain_text("dead lettered")
    await expect(attempts.nth(1)).to_contain_text("schema migration")
    await expect(detail).to_contain_text("sluice:articles")

    # The story of the request: both events in commit order, each with its deliveries.
    await detail.get_by_role("button", name=f"Show trace {TRACE}").click()
    trace = page.locator("#trace-panel")
    await expect(trace.locator("#trace-title")).to_have_text(f"Trace {TRACE}")
    await expect(trace.locator("#trace-summary")).to_contain_text("2 events in commit order")
    stories = trace.locator("article")
    await expect(stories).to_have_count(2)
    await expect(stories.nth(0)).to_contain_text(home_id)
    await expect(stories.nth(0).locator("tbody tr")).to_have_count(1)
    await expect(stories.nth(0)).to_contain_text("handled")
    await expect(stories.nth(1).locator("tbody tr")).to_have_count(2)
    # Back from the trace to one of its events.
    await (
        stories.nth(0)
        .get_by_role("button", name=f"Details of event ArticleViewed {home_id}")
        .click()
    )
    await expect(detail.locator("#event-fields")).to_contain_text(home_id)

    # An unknown type is refused, naming the parameter; the listed events stay.
    await page.get_by_label("Type", exact=True).fill("NoSuchThing")
    await page.get_by_role("button", name="Search").click()
    await expect(page.get_by_role("status")).to_contain_text("(422)")
    await expect(page.get_by_role("status")).to_contain_text("type is not an event type")

    shot = tmp_path / "admin-trace.png"
    await page.get_by_label("Type", exact=True).fill("")
    await page.get_by_role("button", name="Search").click()
    await events.filter(has_text=launch_id).locator("td").first.click()
    await detail.get_by_role("button", name=f"Show trace {TRACE}").click()
    await expect(stories).to_have_count(2)
    await page.locator("#events-title").scroll_into_view_if_needed()
    clip = await page.evaluate(
        "() => { const a = document.getElementById('events-title').closest('section')"
        ".getBoundingClientRect(), b = document.getElementById('trace-panel')"
        ".getBoundingClientRect(); return {x: 0, y: a.top + window.scrollY - 16,"
        " width: document.documentElement.clientWidth, height: b.bottom - a.top + 32}; }"
    )
    await page.screenshot(path=shot, full_page=True, clip=clip)
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("SLUICE_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, SCREENSHOT)


async def test_a_group_is_paused_and_resumed_and_dead_letters_redriven_in_bulk(
    page: Page,
    ops_url: str,
    ops_config: Config,
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    from playwright.async_api import expect

    broken = {"on": True}
    start_relay()
    start_worker(spec=broken_for(resources, "launch-post", broken), config=ops_config)
    await post_views(resources, "launch-post", 2)
    dead_key = resources.keys.dead("article-views")

    async def dead_lettered() -> bool:
        return await resources.redis.xlen(dead_key) == 2

    await wait_for(dead_lettered)
    await sign_in(page, ops_url, ADMIN_TOKEN)

    group = page.locator("#groups tbody tr", has_text="sluice:articles")
    await group.get_by_role("button", name="Pause group article-views").click()
    await expect(page.get_by_role("status")).to_contain_text("Paused article-views")
    await expect(group).to_contain_text("paused")
    assert "article-views" in await paused_groups(resources.store)
    await group.get_by_role("button", name="Resume group article-views").click()
    await expect(page.get_by_role("status")).to_contain_text("Resumed article-views")
    await expect(group.get_by_role("button", name="Pause group article-views")).to_be_visible()
    assert await paused_groups(resources.store) == {}

    # Bulk redrive: a type that matches nothing, then the group's letters.
    broken["on"] = False
    await page.get_by_label("Group", exact=True).select_option("article-views")
    await page.get_by_label("Event type").fill("UserRegistered")
    await page.get_by_role("button", name="Redrive all matching").click()
    await expect(page.locator("#bulk-result")).to_have_text(
        "Redriven 0 dead letters (article-views, UserRegistered)."
    )
    await page.get_by_label("Event type").fill("ArticleViewed")
    await page.get_by_role("button", name="Redrive all matching").click()
    await expect(page.get_by_role("status")).to_contain_text(
        "Redriven 2 dead letters (article-views, ArticleViewed)."
    )

    async def processed() -> bool:
        return await views(resources, "launch-post") == 2

    await wait_for(processed)
    await expect(page.locator("#dead-total")).to_have_text("0", timeout=WAIT_MS)


def hanging(resources: Resources, release: asyncio.Event) -> GroupSpec:
    """article-views whose handler hangs until ``release``: its consumer stalls."""
    inner = default_apps().groups["article-views"](resources).handler

    async def handle(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        await release.wait()
        return await inner(ds)

    return GroupSpec("article-views", ("articles",), handle)


@pytest.fixture
async def release() -> AsyncIterator[asyncio.Event]:
    event = asyncio.Event()
    yield event
    event.set()  # before the workers stop: they finish the work in hand


async def test_a_stalled_consumer_is_flagged_and_every_group_has_a_chart(
    page: Page,
    ops_url: str,
    ops_config: Config,
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    release: asyncio.Event,
) -> None:
    from playwright.async_api import expect

    start_relay()
    start_worker(spec=hanging(resources, release), name="stuck-1", config=ops_config)
    await post_views(resources, "home", 3)
    await sign_in(page, ops_url, ADMIN_TOKEN)

    stalled = page.locator("#stalled-panel")
    await expect(stalled).to_be_visible(timeout=WAIT_MS)
    await expect(stalled.locator("tbody tr")).to_contain_text("stuck-1")
    await expect(stalled.locator("tbody tr")).to_contain_text("article-views")
    await expect(page.locator("#stalled-total")).to_have_text("1")
    group = page.locator("#groups tbody tr", has_text="sluice:articles")
    await expect(group).to_contain_text("1 stalled")

    charts = page.locator("#charts svg")
    await expect(charts).to_have_count(len(default_apps().groups))
    chart = page.locator("#charts svg[data-group='article-views']")
    await expect(chart.locator("title")).to_contain_text("article-views, last 60 minutes:")
    assert await chart.locator("polyline").count() >= 3  # handled, failed, dead-lettered
    await page.get_by_label("Period").select_option("1440")
    await expect(chart.locator("title")).to_contain_text("last 24 hours")

    release.set()
    await expect(stalled).to_be_hidden(timeout=WAIT_MS)
    await wait_for(lambda: _views_are(resources, 3))


async def _views_are(resources: Resources, n: int) -> bool:
    return await views(resources, "home") == n


async def test_a_queued_job_is_cancelled_from_the_page(
    page: Page, ops_url: str, resources: Resources
) -> None:
    from playwright.async_api import expect

    await add_user(resources.store)
    await add_link(resources.store, "report", "https://example.org/")
    job, _ = await jobs.request_export(resources.store, OWNER, "report", "trace-job")

    await sign_in(page, ops_url, ADMIN_TOKEN)
    row = page.locator("#jobs tbody tr", has_text=job.id)
    await expect(row).to_contain_text("queued")
    await expect(row).to_contain_text("report")
    await row.get_by_role("button", name=f"Cancel job {job.id}").click()
    await expect(page.get_by_role("status")).to_contain_text(f"Cancelled job {job.id}")
    await expect(page.locator("#jobs tbody")).to_have_text("No queued or running jobs.")
    cancelled = await jobs.get_job(resources.store, job.id)
    assert cancelled is not None and cancelled.status == "cancelled"
