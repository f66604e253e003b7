"""Routes that take bodies larger than the application's ``MAX_BODY`` (64 KiB), and how
large, from the configuration. The request middleware reads each body before the view
runs and holds it to this limit (413 beyond)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from sluice.config import Config
from sluice.http.keys import CONFIG

# (method, route pattern) -> the limit in bytes.
LARGER_BODIES: dict[tuple[str, str], Callable[[Config], int]] = {
    ("POST", "/v1/links/imports"): lambda config: config.import_max_bytes,
}


def with_body_limit(request: web.Request) -> web.Request:
    """``request``, or its clone with the larger limit its route allows."""
    resource = request.match_info.route.resource
    if resource is None:
        return request
    limit = LARGER_BODIES.get((request.method, resource.canonical))
    if limit is None:
        return request
    return request.clone(client_max_size=limit(request.app[CONFIG]))
