"""A static HTML page of the package served with strict headers: its inline script and
style allowed by hash in the Content-Security-Policy, nothing else (``/docs``, and the
operations app's ``/admin``)."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from aiohttp import web

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
        """The page as an HTML response with its headers."""
        return web.Response(
            body=self.body, content_type="text/html", charset="utf-8", headers=self.headers
        )


def inline_hashes(tag: str, html: str) -> str:
    """The CSP sources that allow exactly the inline ``<script>`` or ``<style>`` blocks of
    ``html``, by their SHA-256."""
    digests = (hashlib.sha256(block.encode()).digest() for block in _INLINE[tag].findall(html))
    return " ".join(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)
