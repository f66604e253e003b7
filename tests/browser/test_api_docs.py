"""GET /docs in headless Chromium: reached from /admin, it renders the OpenAPI document
with nothing loaded from another host.

``SLUICE_UPDATE_SCREENSHOT=1`` also copies the page's screenshot to
docs/assets/api-docs.png (the README shows it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from sluice.app.assembly import create_app
from sluice.config import Config

if TYPE_CHECKING:
    from playwright.async_api import Page, Request, Route

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "assets" / "api-docs.png"
WAIT_MS = 15_000


@pytest.fixture
async def base_url(aiohttp_server: Any, make_config: Callable[..., Config]) -> AsyncIterator[str]:
    server = await aiohttp_server(create_app(make_config()))
    yield str(server.make_url("")).rstrip("/")


@pytest.mark.stores("sqlite")  # the page reads no data: one store is enough
async def test_the_api_docs_page_shows_an_operation(
    page: Page, base_url: str, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    origin = urlsplit(base_url).netloc
    elsewhere: list[str] = []
    refused: list[str] = []

    async def only_this_host(route: Route, request: Request) -> None:
        if urlsplit(request.url).netloc == origin or request.url.startswith("data:"):
            await route.continue_()
        else:  # a CDN, a validator badge, a web font: the page must not need them
            elsewhere.append(request.url)
            await route.abort()

    await page.route("**/*", only_this_host)
    page.on("console", lambda m: refused.append(m.text) if "Content Security" in m.text else None)

    await page.goto(f"{base_url}/admin")
    await page.get_by_role("link", name="API docs").click()
    await expect(page).to_have_url(f"{base_url}/docs")
    # One section per group, folded: the users' one holds registration.
    await page.locator("h3.opblock-tag[data-tag=users]").click()
    operation = page.locator(".opblock-post", has=page.locator('[data-path="/v1/users"]'))
    await expect(operation).to_be_visible(timeout=WAIT_MS)
    await expect(operation).to_contain_text("Register")
    await operation.locator(".opblock-summary-control").click()
    created = operation.locator('tr.response[data-code="201"]')
    await expect(created).to_be_visible()
    await expect(created).to_contain_text("the new user")
    # The schema of the answer is there too, drawn from components.schemas.
    await expect(operation.locator(".responses-wrapper")).to_contain_text("verified_at")

    shot = tmp_path / "api-docs.png"
    await page.set_viewport_size({"width": 1360, "height": 1500})
    await page.evaluate("window.scrollTo(0, 0)")
    await page.screenshot(path=shot)
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("SLUICE_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
    assert elsewhere == []
    assert refused == []
