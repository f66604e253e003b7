"""/admin links a trace to the team's tracing UI (docs/guides/tracing.md, "From /admin to
your tracing UI"), in headless Chromium: with SLUICE_TRACE_URL set, an event's panel and
its trace's panel each have an "Open in <host>" link to the filled-in template; without
it, neither has a link."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from sluice.app.assembly import create_app
from sluice.builtin.articles.events import ArticleViewed
from sluice.config import Config
from sluice.process.resources import Resources
from tests.browser.admin_page import ADMIN_TOKEN, WAIT_MS, sign_in

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.topologies("single")

TEMPLATE = "http://localhost:16686/trace/{trace_id}"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


async def _admin(aiohttp_server: Any, config: Config, resources: Resources) -> str:
    async with resources.store.transaction() as tx:
        await tx.append(ArticleViewed(article_id="launch", viewer="ada", trace_id=TRACE))
    server = await aiohttp_server(create_app(config))
    return str(server.make_url("/admin"))


async def _open_event_and_trace(page: Page) -> None:
    from playwright.async_api import expect

    await page.get_by_label("Trace id").fill(TRACE)
    await page.get_by_role("button", name="Search").click()
    events = page.locator("#events tbody tr")
    await expect(events).to_have_count(1, timeout=WAIT_MS)
    await events.first.locator("td").first.click()
    await expect(page.locator("#event-panel")).to_be_visible()


async def test_an_event_and_its_trace_link_to_the_tracing_ui(
    page: Page, aiohttp_server: Any, make_config: Callable[..., Config], resources: Resources
) -> None:
    from playwright.async_api import expect

    config = make_config(admin_token=ADMIN_TOKEN, trace_url=TEMPLATE)
    await sign_in(page, await _admin(aiohttp_server, config, resources), ADMIN_TOKEN)
    await _open_event_and_trace(page)
    href = f"http://localhost:16686/trace/{TRACE}"
    event_link = page.locator("#event-panel").get_by_role("link", name="Open in localhost:16686")
    await expect(event_link).to_have_attribute("href", href)
    await expect(event_link).to_have_attribute("target", "_blank")
    await expect(event_link).to_have_attribute("rel", "noopener noreferrer")

    await page.locator("#event-panel").get_by_role("button", name=f"Show trace {TRACE}").click()
    trace = page.locator("#trace-panel")
    await expect(trace.locator("#trace-title")).to_have_text(f"Trace {TRACE}")
    trace_link = trace.get_by_role("link", name="Open in localhost:16686")
    await expect(trace_link).to_have_attribute("href", href)
    await expect(trace_link).to_be_visible()


async def test_without_the_setting_there_is_no_link(
    page: Page, aiohttp_server: Any, make_config: Callable[..., Config], resources: Resources
) -> None:
    from playwright.async_api import expect

    config = make_config(admin_token=ADMIN_TOKEN)
    await sign_in(page, await _admin(aiohttp_server, config, resources), ADMIN_TOKEN)
    await _open_event_and_trace(page)
    await page.locator("#event-panel").get_by_role("button", name=f"Show trace {TRACE}").click()
    await expect(page.locator("#trace-title")).to_have_text(f"Trace {TRACE}")
    await expect(page.locator("#trace-summary")).to_contain_text("1 events in commit order")
    await expect(page.get_by_role("link", name="Open in localhost:16686")).to_have_count(0)
    await expect(page.locator("#trace-open")).to_be_hidden()
    await expect(page.locator(".trace-link")).to_have_count(0)
