"""The /admin page's test parts: its token, how long to wait for it, signing in, and a
group that fails on purpose so that the page has a dead letter to show."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sluice.app.assembly import default_apps
from sluice.process.resources import Resources
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec

if TYPE_CHECKING:
    from playwright.async_api import Page

ADMIN_TOKEN = "browser-admin-token-0123456789abcdef"
WAIT_MS = 15_000  # the page refreshes every 3 s


def broken_for(resources: Resources, article_id: str, broken: dict[str, bool]) -> GroupSpec:
    """article-views, failing every view of ``article_id`` while ``broken["on"]``."""
    inner = default_apps().groups["article-views"](resources).handler

    async def handle(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        def bad(d: Delivery) -> bool:
            return broken["on"] and getattr(d.event, "article_id", None) == article_id

        good = [d for d in ds if not bad(d)]
        failures = dict(await inner(good)) if good else {}
        error = RuntimeError("article_views is locked by a schema migration")
        failures.update({d.message.key: error for d in ds if bad(d)})
        return failures

    return GroupSpec("article-views", ("articles",), handle)


async def sign_in(page: Page, url: str, token: str, *, refused: bool = False) -> None:
    """Sign in and, unless the token is to be ``refused``, wait until the dashboard's
    first refresh is drawn: its tables filling in move what is below them, and a click
    during that move can land beside its button (one loaded full-suite run: the events
    search's click sent no request)."""
    from playwright.async_api import expect

    await page.goto(url)
    await page.get_by_label("Admin token").fill(token)
    await page.get_by_role("button", name="Open dashboard").click()
    if not refused:
        drawn = re.compile(r"^(Updated|Last attempt) ")
        await expect(page.locator("#refreshed")).to_have_text(drawn, timeout=WAIT_MS)
