"""The Links panel of /admin in headless Chromium: orphan visits (GETs of unknown codes)
as bars per UTC day and the top codes, with the period to choose (docs/guides/links.md).

The API runs in process on a real port; the requests for unknown codes are real GETs,
the older days are counted into the app's own tally as the redirect counts them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from sluice.app.assembly import create_app
from sluice.builtin.links.http.keys import ORPHANS
from sluice.config import Config
from sluice.events import utcnow
from tests.browser.admin_page import ADMIN_TOKEN, WAIT_MS, sign_in

if TYPE_CHECKING:
    from playwright.async_api import Page


@pytest.fixture
async def server(aiohttp_server: Any, make_config: Callable[..., Config]) -> Any:
    config = make_config(admin_token=ADMIN_TOKEN, orphan_codes_per_day=3)
    return await aiohttp_server(create_app(config))


async def get_unknown(server: Any, code: str, times: int) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(times):
            async with session.get(server.make_url(f"/{code}"), allow_redirects=False) as answer:
                assert answer.status == 404


async def test_orphan_visits_show_per_day_and_by_code(page: Page, server: Any) -> None:
    from playwright.async_api import expect

    now = utcnow()
    await get_unknown(server, "wp-login", 3)
    await get_unknown(server, "old-flyer", 2)
    await get_unknown(server, "typo42", 1)
    await get_unknown(server, "scan0001", 1)  # the day's fourth code: beyond the cap of 3
    tally = server.app[ORPHANS]
    for _ in range(2):
        tally.count("old-flyer", now - timedelta(days=3))
    for _ in range(5):
        tally.count("ancient", now - timedelta(days=40))

    await sign_in(page, str(server.make_url("/admin")), ADMIN_TOKEN)
    panel = page.locator("#links-panel")
    await expect(panel.locator("#orphan-total")).to_have_text("9", timeout=WAIT_MS)
    today = now.astimezone(UTC).date()
    await expect(panel.locator("#orphan-peak")).to_have_text(f"7 ({today.isoformat()[5:]})")
    await expect(panel.locator("#orphan-other")).to_have_text("1")
    await expect(panel.locator("#orphan-other-card")).to_have_class("card warn")

    rows = panel.locator("#orphan-codes tbody tr")
    await expect(rows).to_have_count(3)
    await expect(rows.nth(0)).to_contain_text("old-flyer")
    await expect(rows.nth(0)).to_contain_text("44 %")
    await expect(rows.nth(1)).to_contain_text("wp-login")
    await expect(rows.nth(2)).to_contain_text("typo42")

    bars = panel.locator("#orphan-chart svg rect.bar")
    await expect(bars).to_have_count(2)
    three_days_ago = (today - timedelta(days=3)).isoformat()
    await expect(bars.nth(0)).to_have_attribute("data-date", three_days_ago)
    await expect(bars.nth(0).locator("title")).to_have_text(f"{three_days_ago}: 2")
    await expect(bars.nth(1).locator("title")).to_have_text(f"{today.isoformat()}: 7")
    # The busier day draws the taller bar.
    low, high = [float(await bars.nth(i).get_attribute("height") or 0) for i in (0, 1)]
    assert 0 < low < high

    # A longer period reaches the older day: a third bar, and a new busiest code.
    await panel.get_by_label("Days").select_option("90")
    await expect(panel.locator("#orphan-total")).to_have_text("14", timeout=WAIT_MS)
    await expect(bars).to_have_count(3)
    await expect(rows.nth(0)).to_contain_text("ancient")

    await panel.get_by_label("Days").select_option("7")
    await expect(panel.locator("#orphan-total")).to_have_text("9", timeout=WAIT_MS)
    await expect(bars).to_have_count(2)


async def test_no_orphan_visits_says_so(page: Page, server: Any) -> None:
    from playwright.async_api import expect

    await sign_in(page, str(server.make_url("/admin")), ADMIN_TOKEN)
    panel = page.locator("#links-panel")
    await expect(panel.locator("#orphan-total")).to_have_text("0", timeout=WAIT_MS)
    await expect(panel.locator("#orphan-peak")).to_have_text("none")
    await expect(panel.locator("#orphan-codes tbody")).to_contain_text(
        "No requests for unknown codes in this period."
    )
    await expect(panel.locator("#orphan-chart svg rect.bar")).to_have_count(0)
    await expect(panel.locator("#orphan-other-card")).to_have_class("card")
