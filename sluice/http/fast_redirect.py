"""The redirect's own way in: ``GET /{code}`` of a cached, live link answered before
aiohttp's router and the request middleware (docs/design/redirects.md).

The redirect is the hottest path of a link service, and the middleware is a third of
its cost (bench/README.md, the callgrind breakdown): the trace-id context, the
problem+json wrapper, the request line and aiohttp's wrapper chain. This path does
only what such a redirect needs: the trace id (the caller's, or a new one) for the
visit and the ``X-Trace-Id`` header, the cache lookup, the choice among the link's
rules (in process, as the full path makes it), the visit handed to the group
commit, and the request tally of ``/metrics``. It writes no request line: the
committed ``LinkVisited`` is the redirect's durable record (``SLUICE_REDIRECT_LOG``).

Everything else takes the full path through the app, unchanged: a code not in the
cache (its database lookup), unknown, disabled, expired or not yet valid links (404
and 410 as problem+json, logged), links with ``max_visits`` (their count is a Redis
call), password links (their form; ``Target.plain`` tests one more attribute), ``HEAD``
(logged), a request with a body, a path of another route, and every request when
``SLUICE_REDIRECT_LOG=all``. A failure here falls back
to the full path before any visit was recorded, so a request never fails for it.

The core knows no link: what answers is the ``fast_path`` an app declares (the links
app's ``Redirects``, in ``sluice.builtin.links.http.fast``), and its ``answer`` is the
choice and the visit. ``sluice api`` asks it twice: first
as each request head is parsed, where the answer is written straight to the
connection (``sluice.http.redirect_wire``), and then here, for the heads aiohttp
handles (one pipelined behind a request still being answered, say).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import structlog
from aiohttp import hdrs, web
from aiohttp.abc import AbstractRouter
from aiohttp.web_urldispatcher import UrlDispatcher

from sluice.http.app_keys import APPS, CONFIG
from sluice.http.middlewares import TRACE_ID_HEADER
from sluice.telemetry.prometheus import REQUEST_TALLY

if TYPE_CHECKING:
    from sluice.app.declare import FastAnswers

log = structlog.get_logger(__name__)

ROUTE = "/{code}"  # the tally's label, as the full path reports it
# A redirect's Cache-Control: each follow is a visit to count, never a cached answer.
NO_STORE = "private, no-store"


def install(server: web.Server, app: web.Application) -> FastAnswers | None:
    """Answer the redirects of ``app`` first on ``server`` (an ``AppRunner``'s, after
    ``setup()`` and before connections arrive); what answers them, for a site to answer
    them earlier still (``sluice.http.redirect_wire``). None, and nothing installed, with
    ``SLUICE_REDIRECT_LOG=all`` or when no app declares a ``fast_path`` (the links app's
    ``sluice.builtin.links.http.fast``). With tracing on, what answers makes the
    redirect's SERVER span (``sluice.telemetry.redirect_span``: docs/guides/tracing.md)."""
    factory = app[APPS].fast_path
    if factory is None or app[CONFIG].redirect_log == "all":
        return None
    full = server.request_handler
    redirects = factory(app)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.method != "GET" or request.body_exists:
            return await full(request)
        started = time.perf_counter()
        answer = redirects.answer(request.path[1:], request)
        if answer is None:
            return await full(request)
        location, status, trace_id = answer
        response = web.Response(
            status=status,
            headers={
                hdrs.LOCATION: location,
                hdrs.CACHE_CONTROL: NO_STORE,
                TRACE_ID_HEADER: trace_id,
            },
        )
        REQUEST_TALLY.add("GET", ROUTE, status, time.perf_counter() - started)
        return response

    server.request_handler = handle
    return redirects


def other_routes(router: AbstractRouter) -> frozenset[str]:
    """The one-segment paths of the app's other routes (``/admin``, ``/metrics``...),
    which ``/{code}`` must never shadow: routes come before it in the router."""
    assert isinstance(router, UrlDispatcher)
    found: set[str] = set()
    for resource in router.resources():
        info = resource.get_info()
        path = info.get("path") or info.get("prefix")
        if isinstance(path, str) and path.count("/") == 1:
            found.add(path[1:])
    return frozenset(found)
