"""A password link followed in headless Chromium to a target on another origin
(docs/guides/links.md, "Password links").

The form's Content-Security-Policy says ``form-action 'self'``, and Chromium (Safari
too) applies it to every redirect that answers the form: a 302 to the target would be
blocked. The short link's API and the target are two servers on two loopback ports,
so two origins, as a short domain and the site it points at are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sluice.app.assembly import create_app
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.http.app_keys import STORE
from tests.api.helpers import AiohttpClient, Client, stored_events, user_token
from tests.api.link_helpers import committed, create
from tests.browser.admin_page import WAIT_MS

if TYPE_CHECKING:
    from playwright.async_api import ConsoleMessage, Page, Response

SECRET = "correct horse battery"
ARRIVED = "You reached the page behind the password"


class Target:
    """The site a link points at: one page, and how many times it was fetched."""

    def __init__(self) -> None:
        self.fetched = 0
        self.server: TestServer | None = None

    async def landing(self, request: web.Request) -> web.Response:
        self.fetched += 1
        document = f"<!doctype html><title>Target</title><h1>{ARRIVED}</h1>"
        return web.Response(text=document, content_type="text/html")

    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/landing?from=sluice"))


@pytest.fixture
async def target(aiohttp_server: Any) -> Target:
    site = Target()
    app = web.Application()
    app.router.add_get("/landing", site.landing)
    site.server = await aiohttp_server(app)
    return site


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, make_config: Callable[..., Config]) -> Client:
    return await aiohttp_client(create_app(make_config()))


async def short_link(client: Client, target: Target) -> tuple[str, str]:
    """A password link to the target: its code and its short URL."""
    link = await create(client, await user_token(client), url=target.url(), password=SECRET)
    assert target.server is not None and target.server.port != client.port  # two origins
    return link["code"], str(client.make_url(f"/{link['code']}"))


async def visits(client: Client, code: str) -> int:
    await committed(client)
    assert client.app is not None
    events = await stored_events(client.app[STORE])
    return sum(1 for e, _ in events if isinstance(e, LinkVisited) and e.code == code)


class Watched:
    """What a page said in its console (a blocked form's CSP violation among it) and the
    statuses its POSTs were answered with, in order."""

    def __init__(self, page: Page) -> None:
        self.said: list[str] = []
        self.posts: list[int] = []
        page.on("console", self._said)
        page.on("response", self._answered)

    def _said(self, message: ConsoleMessage) -> None:
        self.said.append(message.text)

    def _answered(self, response: Response) -> None:
        if response.request.method == "POST":
            self.posts.append(response.status)


async def submit(page: Page, password: str) -> None:
    """Type ``password`` into the form and send it."""
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Open the link").click()


async def arrive(page: Page, url: str, watched: Watched) -> None:
    """Until the browser shows the target's page at ``url``; else fail saying where it is
    and what the browser said (Chromium names a blocked redirect in its console)."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout
    from playwright.async_api import expect

    try:
        await page.wait_for_url(url, timeout=WAIT_MS)
    except PlaywrightTimeout:
        where = f"the browser is at {page.url}, not the target"
        raise AssertionError(f"{where}; it said {watched.said}") from None
    await expect(page.get_by_role("heading")).to_have_text(ARRIVED)


async def test_the_right_password_opens_a_target_on_another_origin_with_one_visit(
    page: Page, client: Client, target: Target
) -> None:
    from playwright.async_api import expect

    code, short = await short_link(client, target)
    watched = Watched(page)
    opened = await page.goto(short)
    assert opened is not None and opened.status == 200
    await expect(page.get_by_role("heading")).to_have_text("Password required")

    await submit(page, SECRET)
    await arrive(page, target.url(), watched)
    assert target.fetched == 1
    assert await visits(client, code) == 1

    # Back: the form again, asked for afresh; nothing is sent twice, nothing counted twice.
    await page.go_back()
    await expect(page.get_by_role("heading")).to_have_text("Password required")
    assert page.url == short
    assert (target.fetched, await visits(client, code)) == (1, 1)


async def test_a_wrong_password_shows_the_form_again_and_the_right_one_then_opens(
    page: Page, client: Client, target: Target
) -> None:
    from playwright.async_api import expect

    code, short = await short_link(client, target)
    watched = Watched(page)
    await page.goto(short)

    await submit(page, "not the password")
    await expect(page.get_by_role("alert")).to_have_text("Wrong password. Please try again.")
    assert watched.posts == [401]
    assert page.url == short
    assert (target.fetched, await visits(client, code)) == (0, 0)

    await submit(page, SECRET)
    await arrive(page, target.url(), watched)
    assert (target.fetched, await visits(client, code)) == (1, 1)
