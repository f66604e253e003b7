"""GET /admin: the operations page, one static HTML file shipped in the package
(``sluice/builtin/operations/static/admin.html``).

The page needs no token to load; it asks for the admin token and sends it as a
bearer token on its own calls to the admin API. Its script and style are
inline, so the Content-Security-Policy allows exactly those (by hash) and
connections to this origin, nothing else.
"""

from __future__ import annotations

import asyncio
import functools
from importlib import resources

from aiohttp import web

from sluice.app import Route
from sluice.app.advanced import Page, inline_hashes


@functools.cache
def load_page() -> Page:
    """The page and its headers, read from the package once per process."""
    static = resources.files("sluice.builtin.operations") / "static"
    html = (static / "admin.html").read_text("utf-8")
    policy = (
        "default-src 'none'; "
        f"script-src {inline_hashes('script', html)}; style-src {inline_hashes('style', html)}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return Page.of(html, policy)


async def admin_page(request: web.Request) -> web.Response:
    return (await asyncio.to_thread(load_page)).response()


ROUTES = (
    Route(
        "GET",
        "/admin",
        admin_page,
        {
            "operationId": "adminDashboard",
            "summary": "The operations dashboard: one HTML page that asks for the admin token",
            "description": (
                "Static; it needs no token itself. In the browser it keeps the admin token for the "
                "tab and calls the admin routes with it, refreshing every 3 seconds."
            ),
            "responses": {
                "200": {
                    "description": "the page",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                }
            },
        },
    ),
)
