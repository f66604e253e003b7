"""GET /docs: the OpenAPI document (``/openapi.json``) read in a browser, with Swagger UI.

Swagger UI is vendored under ``static/swagger-ui`` (``tools/vendor_swagger_ui.py`` says
why and replaces it), so the page loads nothing from another host and works offline. Its
one inline script is allowed by hash; Swagger UI sets style attributes as it renders,
hence ``'unsafe-inline'`` for styles (not for scripts). "Try it out" calls this origin,
or ``SLUICE_BASE_URL``'s when the document names another server.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from sluice.errors import NotFound
from sluice.http.app_keys import CONFIG
from sluice.http.conditional import Validators, not_modified, requested_range
from sluice.http.route_docs import Route, html_page, problem
from sluice.http.static_page import Page, inline_hashes

# What the page loads, with its content types; nothing else under /docs/assets/ is served.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
}


def _static() -> Path:
    return Path(str(resources.files("sluice.http") / "static"))


@functools.cache
def load_page(base_url: str) -> Page:
    """The page and its headers, read from the package once per process."""
    html = (_static() / "docs.html").read_text("utf-8")
    base = urlsplit(base_url)
    connect = "'self'" + (f" {base.scheme}://{base.netloc}" if base.netloc else "")
    policy = (
        "default-src 'none'; "
        f"script-src 'self' {inline_hashes('script', html)}; "
        "style-src 'self' 'unsafe-inline'; "
        f"connect-src {connect}; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return Page.of(html, policy)


async def docs_page(request: web.Request) -> web.Response:
    return (await asyncio.to_thread(load_page, request.app[CONFIG].base_url)).response()


@functools.cache
def load_asset(name: str) -> tuple[bytes, Validators]:
    """An asset's bytes and validators, read from the package once per process."""
    path = _static() / "swagger-ui" / name
    body = path.read_bytes()
    modified = datetime.fromtimestamp(int(path.stat().st_mtime), UTC)
    return body, Validators(hashlib.sha256(body).hexdigest()[:32], modified, len(body))


async def docs_asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = ASSETS.get(name)
    if content_type is None:
        raise NotFound(f"no asset {name!r}; the page loads {', '.join(sorted(ASSETS))}")
    # From memory, not FileResponse: its sendfile() writes past the transport, where the
    # write timeout cannot see a client that does not read (sluice.http.connections).
    body, current = await asyncio.to_thread(load_asset, name)
    if not_modified(request, current):
        return web.Response(status=304, headers=current.headers())
    headers = {
        **current.headers(),
        hdrs.CONTENT_TYPE: content_type,
        hdrs.CACHE_CONTROL: "no-cache",
        "X-Content-Type-Options": "nosniff",
    }
    span = requested_range(request, current)
    if span is None:
        return web.Response(body=body, headers=headers)
    start, stop = span
    headers[hdrs.CONTENT_RANGE] = f"bytes {start}-{stop - 1}/{current.size}"
    return web.Response(status=206, body=body[start:stop], headers=headers)


ROUTES = (
    Route(
        "GET",
        "/docs",
        docs_page,
        {
            "operationId": "apiDocs",
            "summary": "This API's documentation, in a browser (Swagger UI over /openapi.json)",
            "description": "Static; it needs no token. Everything it loads comes from this"
            " service (/docs/assets/...), so it works offline.",
            "responses": {"200": html_page("the page")},
        },
    ),
    Route(
        "GET",
        "/docs/assets/{name}",
        docs_asset,
        {
            "operationId": "apiDocsAsset",
            "summary": "A script or style sheet of the /docs page (Swagger UI, vendored)",
            "parameters": [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "enum": sorted(ASSETS)},
                }
            ],
            "responses": {
                "200": {
                    "description": "the file",
                    "content": {t: {"schema": {"type": "string"}} for t in ASSETS.values()},
                },
                "206": {"description": "the bytes a Range asks for"},
                "304": {"description": "not modified since the ETag or date the request names"},
                "404": problem("not an asset of the page"),
                "416": problem("a byte range past the end of the file"),
            },
        },
    ),
)
