"""A flow group's block on /admin in headless Chromium (docs/guides/operate.md, "Operate
flow control"): opened from the Groups table, it shows the limits, the keys and entries
waiting, the busiest keys with their slots in use, and a key's waiting entries in
order, chosen from the list or found by the search box; a group without flow says so.

Real store and Redis; the entries wait as a consumer parks them (tests/flow_app).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from sluice.app.assembly import create_app
from sluice.config import Config
from sluice.process.resources import Resources
from sluice.streams.group_setup import ensure_group
from tests.browser.admin_page import ADMIN_TOKEN, WAIT_MS, sign_in
from tests.flow_app import APPS
from tests.flow_app.waiting import hold_and_park

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.apps(APPS)


@pytest.fixture
async def flow_url(aiohttp_server: Any, make_config: Callable[..., Config]) -> str:
    server = await aiohttp_server(create_app(make_config(admin_token=ADMIN_TOKEN, apps=APPS)))
    return str(server.make_url("/admin"))


async def test_a_flow_groups_block_shows_its_keys_and_a_keys_waiting_entries(
    page: Page, flow_url: str, resources: Resources
) -> None:
    from playwright.async_api import expect

    redis, keys = resources.redis, resources.keys
    await ensure_group(redis, keys.stream("works", 0), "throttled")
    await ensure_group(redis, keys.stream("users", 0), "mail")
    await hold_and_park(redis, keys)  # a: 4 in handling, 6 waiting; b: 4 and 2
    await sign_in(page, flow_url, ADMIN_TOKEN)

    await page.get_by_role("button", name="Show group mail").click()
    await expect(page.locator("#group-title")).to_have_text("Group mail", timeout=WAIT_MS)
    await expect(page.locator("#flow-none")).to_be_visible()
    await expect(page.locator("#flow-block")).to_be_hidden()

    await page.get_by_role("button", name="Show group throttled").click()
    await expect(page.locator("#group-title")).to_have_text("Group throttled", timeout=WAIT_MS)
    fields = page.locator("#group-fields")
    await expect(fields).to_contain_text("tenant")
    await expect(fields).to_contain_text("Concurrency per key4")
    await expect(page.locator("#flow-keys")).to_have_text("2")
    await expect(page.locator("#flow-entries")).to_have_text("8")
    await expect(page.locator("#flow-deferred")).to_have_text("8")
    await expect(page.locator("#flow-slots")).to_have_text("8")
    top = page.locator("#flow-top tbody tr")
    await expect(top).to_have_count(2)
    await expect(top.nth(0).locator("th")).to_have_text("a")
    await expect(top.nth(0).locator("td")).to_have_text(["6", "4 of 4", "no rate"])
    await expect(top.nth(1).locator("th")).to_have_text("b")
    await expect(top.nth(1).locator("td")).to_have_text(["2", "4 of 4", "no rate"])

    await page.get_by_role("button", name="Show waiting entries of key a").click()
    title = page.locator("#flow-backlog-title")
    await expect(title).to_have_text("Waiting entries of a: 6 waiting, 4 in handling")
    rows = page.locator("#flow-backlog tbody tr")
    await expect(rows).to_have_count(6)
    await expect(rows.nth(0)).to_contain_text("WorkQueued")
    await expect(rows.nth(0)).to_contain_text("a4")
    await expect(rows.nth(5)).to_contain_text("a9")

    await page.get_by_label("Key", exact=True).fill("b")
    await page.get_by_role("button", name="Show waiting entries", exact=True).click()
    await expect(title).to_have_text("Waiting entries of b: 2 waiting, 4 in handling")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(1)).to_contain_text("b5")
