"""The /admin page in headless Chromium: sign in, see a dead letter, redrive it with a click.

The API runs in process on a real port, with a real Redis, relay and worker.
``SLUICE_UPDATE_SCREENSHOT=1`` also copies the page's screenshot to
docs/assets/admin.png (the monitoring guide shows it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.task_spec import Task, TaskContext
from tests.browser.admin_page import ADMIN_TOKEN, WAIT_MS, broken_for, sign_in
from tests.integration.helpers import post_views, views

if TYPE_CHECKING:
    from playwright.async_api import Page

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "assets" / "admin.png"
RELEASE = asyncio.Event()


async def hold(ctx: TaskContext) -> None:
    await RELEASE.wait()


def tasks(config: Config) -> list[Task]:
    """Loaded by the app through SLUICE_EXTRA_TASKS: a task that runs until released."""
    return [Task("hold", parse_cron("0 0 0 1 1 *", "UTC"), hold, "a long batch job (an example)")]


@pytest.fixture
def admin_config(make_config: Callable[..., Config]) -> Config:
    return make_config(
        admin_token=ADMIN_TOKEN,
        max_deliveries=2,
        retry_base_ms=20,
        extra_tasks="tests.browser.test_dashboard:tasks",
    )


@pytest.fixture
async def admin_url(aiohttp_server: Any, admin_config: Config) -> AsyncIterator[str]:
    global RELEASE
    RELEASE = asyncio.Event()  # an Event binds to the loop of its first waiter: one per test
    server = await aiohttp_server(create_app(admin_config))
    yield str(server.make_url("/admin"))
    RELEASE.set()


async def test_a_dead_letter_is_redriven_with_a_click(
    page: Page,
    admin_url: str,
    admin_config: Config,
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    tmp_path: Path,
) -> None:
    from playwright.async_api import expect

    broken = {"on": True}
    start_relay()
    start_worker(spec=broken_for(resources, "launch-post", broken), config=admin_config)
    await post_views(resources, "home", 12)
    await post_views(resources, "launch-post", 1)
    dead_key = resources.keys.dead("article-views")

    async def dead_lettered() -> bool:
        return await resources.redis.xlen(dead_key) == 1 and await views(resources, "home") == 12

    await wait_for(dead_lettered)
    [(raw_id, _)] = await resources.redis.xrange(dead_key)
    dead_id = raw_id.decode()

    await sign_in(page, admin_url, ADMIN_TOKEN)
    row = page.locator("#dead-letters tbody tr", has_text=dead_id)
    await expect(row).to_contain_text("article_views is locked", timeout=WAIT_MS)
    await expect(row).to_contain_text("ArticleViewed")
    await expect(page.locator("#streams tbody")).to_contain_text("sluice:articles")
    groups = page.locator("#groups tbody tr", has_text="sluice:articles")
    await expect(groups).to_contain_text("article-views")
    await expect(page.locator("#dead-total")).to_have_text("1")
    # The history: the 13 views, all still in the hot table.
    await expect(page.locator("#hot-events")).to_have_text("13")
    await expect(page.locator("#segments")).to_have_text("0")
    await expect(page.locator("#archived-bytes")).to_have_text("0 B")
    await expect(page.locator("#oldest-event")).to_contain_text(" UTC")

    shot = tmp_path / "admin.png"
    await page.screenshot(path=shot, full_page=True)
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("SLUICE_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, SCREENSHOT)

    broken["on"] = False
    await row.get_by_role("button", name="Redrive").click()
    await expect(page.get_by_role("status")).to_contain_text(f"Redriven dead letter {dead_id}")
    await expect(page.locator("#dead-letters tbody")).to_have_text("No dead letters.")

    async def processed() -> bool:
        return await views(resources, "launch-post") == 1

    await wait_for(processed)
    assert await resources.redis.xlen(dead_key) == 0
    await expect(page.locator("#dead-total")).to_have_text("0", timeout=WAIT_MS)


async def test_refusals_conflicts_and_outages_are_shown(
    page: Page, admin_url: str, redis_server: RedisServer
) -> None:
    from playwright.async_api import expect

    await sign_in(page, admin_url, "not-the-admin-token", refused=True)
    await expect(page.get_by_role("alert")).to_contain_text("refused (401)")
    await expect(page.get_by_label("Admin token")).to_be_visible()

    await page.get_by_label("Admin token").fill(ADMIN_TOKEN)
    await page.get_by_role("button", name="Open dashboard").click()
    task = page.locator("#tasks tbody tr", has_text="hold")
    await task.get_by_role("button", name="Run hold now").click()
    await expect(page.get_by_role("status")).to_contain_text("Started a run of hold")
    await expect(task).to_contain_text("running")
    await task.get_by_role("button", name="Run hold now").click()
    await expect(page.get_by_role("status")).to_contain_text("Conflict (409)")
    RELEASE.set()
    await expect(task).to_contain_text("succeeded", timeout=WAIT_MS)

    redis_server.stop()
    await expect(page.get_by_role("alert")).to_contain_text("(503)", timeout=WAIT_MS)
    await expect(task).to_be_visible()  # what needs no Redis is still shown
