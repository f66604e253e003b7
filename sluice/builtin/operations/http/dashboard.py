"""GET /admin: the operations page, one static HTML file shipped in the package.

The page needs no token to load; it asks for the admin token and sends it as a
bearer token on its own calls to the admin API. Its script and style are
inline, so the Content-Security-Policy allows exactly those (by hash) and
connections to this origin, nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

from sluice.http.apidoc import Route

_INLINE = {tag: re.compile(rf"<{tag}>(.*?)</{tag}>", re.DOTALL) for tag in ("script", "style")}


@dataclass(frozen=True)
class Page:
    """A static page of the package, with the headers each such page carries."""

    body: bytes
    headers: dict[str, str]

    @classmethod
    def of(cls, html: str, policy: str) -> Page:
        """``html`` under the Content-Security-Policy ``policy``, revalidated on each load,
        sending no referrer, its type never sniffed."""
        headers = {
            "Content-Security-Policy": policy,
            "Cache-Control": "no-cache",
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
        }
        return cls(html.encode(), headers)

    def response(self) -> web.Response:
        return web.Response(
            body=self.body, content_type="text/html", charset="utf-8", headers=self.headers
        )


def inline_hashes(tag: str, html: str) -> str:
    """The CSP sources that allow exactly the inline ``<script>`` or ``<style>`` blocks of
    ``html``, by their SHA-256."""
    digests = (hashlib.sha256(block.encode()).digest() for block in _INLINE[tag].findall(html))
    return " ".join(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)


@functools.cache
def load_page() -> Page:
    """The page and its headers, read from the package once per process."""
    html = (resources.files("sluice.http") / "static" / "admin.html").read_text("utf-8")
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
    Route("GET", "/admin", admin_page, {
        "operationId": "adminDashboard",
        "summary": "The operations dashboard: one HTML page that asks for the admin token",
        "description": (
            "Static; it needs no token itself. In the browser it keeps the admin token for the "
            "tab and calls the admin routes with it, refreshing every 3 seconds."
        ),
        "responses": {"200": {"description": "the page",
                              "content": {"text/html": {"schema": {"type": "string"}}}}},
    }),
)  # fmt: skip
