"""/admin's event panel in headless Chromium shows, for an event an event-sourced
aggregate saved, its version, the aggregate's version now and its snapshot
(docs/concepts/aggregates.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from sluice.app import Aggregate, applies, store
from sluice.app.assembly import create_app
from sluice.config import Config
from tests.browser.admin_page import ADMIN_TOKEN, sign_in
from tests.engine_app import APPS, Pinged, registered

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.apps(APPS)


class Source(Aggregate):
    aggregate: ClassVar[str] = "pings"
    snapshot_every: ClassVar[int] = 3
    count: int = 0

    @applies(Pinged)
    def _pinged(self, event: Pinged) -> None:
        self.count += 1


async def test_an_aggregates_event_shows_its_version_and_the_snapshot(
    page: Page, aiohttp_server: Any, make_config: Callable[..., Config]
) -> None:
    from playwright.async_api import expect

    registered()
    app = create_app(make_config(admin_token=ADMIN_TOKEN))
    server = await aiohttp_server(app)
    source = Source("aggregated")
    for n in range(4):
        source.record(Pinged(source="aggregated", note=f"n{n}"))
    async with store(app).transaction() as tx:
        await source.save(tx)
    rows = await store(app).fetchall(
        "SELECT event_id FROM aggregate_events WHERE aggregate_id = ? AND version = 2",
        ("aggregated",),
    )
    (event_id,) = (str(r[0]) for r in rows)

    await sign_in(page, str(server.make_url("/admin")), ADMIN_TOKEN)
    await page.get_by_label("Type", exact=True).fill("Pinged")
    await page.get_by_role("button", name="Search").click()
    await page.locator("#events tbody tr").filter(has_text=event_id).locator("td").first.click()
    fields = page.locator("#event-fields")
    await expect(fields).to_contain_text("2 of pings:aggregated, now at 4")
    await expect(fields).to_contain_text("at version 4 (state version 1)")
