"""The task table of /admin in headless Chromium (docs/guides/tasks.md): each task's policy, pause
and resume, and the cancel of a running run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from sluice.app.assembly import create_app
from sluice.config import Config
from tests.browser.admin_page import ADMIN_TOKEN, WAIT_MS, sign_in

if TYPE_CHECKING:
    from playwright.async_api import Page


@pytest.fixture
async def server(aiohttp_server: Any, make_config: Callable[..., Config]) -> Any:
    config = make_config(
        admin_token=ADMIN_TOKEN,
        extra_tasks="tests.api.test_task_controls:tasks",
        task_overlaps={"forever": "cancel_other"},
        group_timeouts={"forever": 600.0},
    )
    return await aiohttp_server(create_app(config))


async def test_the_task_table_shows_policies_pauses_and_cancels_runs(
    page: Page, server: Any
) -> None:
    from playwright.async_api import expect

    await sign_in(page, str(server.make_url("/admin")), ADMIN_TOKEN)
    task = page.locator("#tasks tbody tr", has_text="forever")
    await expect(task).to_contain_text("cancel_other", timeout=WAIT_MS)
    await expect(task).to_contain_text("timeout 600 s")

    await task.get_by_role("button", name="Pause forever").click()
    await expect(page.get_by_role("status")).to_contain_text("Paused forever")
    await expect(task.locator(".badge.paused")).to_be_visible()
    await task.get_by_role("button", name="Resume forever").click()
    await expect(page.get_by_role("status")).to_contain_text("Resumed forever")
    await expect(task.locator(".badge.paused")).to_have_count(0)

    await task.get_by_role("button", name="Run forever now").click()
    await expect(task).to_contain_text("running", timeout=WAIT_MS)
    cancel = task.get_by_role("button", name="Cancel the running run of forever")
    await cancel.click()
    await expect(task).to_contain_text("cancelled", timeout=WAIT_MS)
    await expect(cancel).to_have_count(0)


async def test_the_backfill_form_runs_a_past_range(page: Page, server: Any) -> None:
    from playwright.async_api import expect

    await sign_in(page, str(server.make_url("/admin")), ADMIN_TOKEN)
    # datetime-local in the browser's zone; the page sends RFC 3339 instants (UTC).
    end = datetime.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    start = end - timedelta(minutes=2)
    form = page.locator("#backfill")
    await form.get_by_label("Task").select_option("minutely")
    await form.get_by_label("From (local time)").fill(start.strftime("%Y-%m-%dT%H:%M:%S"))
    await form.get_by_label("To (local time)").fill(end.strftime("%Y-%m-%dT%H:%M:%S"))
    await form.get_by_role("button", name="Backfill").click()
    await expect(page.get_by_role("status")).to_contain_text(
        "Backfill of minutely started: 3 occurrences", timeout=WAIT_MS
    )
    task = page.locator("#tasks tbody tr", has_text="minutely")
    await expect(task).to_contain_text("backfill", timeout=WAIT_MS)

    await form.get_by_label("To (local time)").fill(
        (datetime.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    )
    await form.get_by_role("button", name="Backfill").click()
    await expect(page.get_by_role("status")).to_contain_text("must not be future")
