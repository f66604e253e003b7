"""The redirect's own way in: ``GET /{code}`` of a cached, live link answered before
aiohttp's router and the request middleware (SPEC 11).

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

``Redirects.answer`` is the choice and the visit. ``sluice api`` asks it twice: first
as each request head is parsed, where the answer is written straight to the
connection (``sluice.http.redirect_wire``), and then here, for the heads aiohttp
handles (one pipelined behind a request still being answered, say).
"""

from __future__ import annotations

import time

import structlog
from aiohttp import hdrs, web
from aiohttp.abc import AbstractRouter
from aiohttp.web_urldispatcher import UrlDispatcher

from sluice.builtin.links.http.redirects import (
    CODE,
    NO_STORE,
    TRUSTED_PROXIES,
    destination,
    visit_of,
)
from sluice.events import new_trace_id, utcnow
from sluice.http.client_address import Caller
from sluice.http.keys import CONFIG, LINK_CACHE, VISITOR_KEY, VISITS
from sluice.http.middlewares import TRACE_ID_HEADER, incoming_trace_id
from sluice.metrics import REQUEST_TALLY

log = structlog.get_logger(__name__)

ROUTE = "/{code}"  # the tally's label, as the full path reports it


def install(server: web.Server, app: web.Application) -> Redirects | None:
    """Answer the redirects of ``app`` first on ``server`` (an ``AppRunner``'s, after
    ``setup()`` and before connections arrive); what answers them, for a site to answer
    them earlier still (``sluice.http.redirect_wire``). None, and nothing installed, with
    ``SLUICE_REDIRECT_LOG=all``."""
    if app[CONFIG].redirect_log == "all":
        return None
    full = server.request_handler
    redirects = Redirects(app)

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


class Redirects:
    """The redirects of one app that the way in answers, and what answering one takes."""

    __slots__ = ("_cache", "_key", "_others", "_trusted", "_visits")

    def __init__(self, app: web.Application) -> None:
        self._others = other_routes(app.router)
        self._cache, self._visits, self._key = app[LINK_CACHE], app[VISITS], app[VISITOR_KEY]
        self._trusted = app[TRUSTED_PROXIES]

    def answer(self, code: str, caller: Caller) -> tuple[str, int, str] | None:
        """(location, status, trace id) of the redirect of ``code`` (the path after its
        ``/``) for a ``GET`` without a body, its visit handed to the group commit; None:
        the full path answers the request (nothing was recorded)."""
        if code in self._others or not CODE.fullmatch(code):
            return None
        try:
            target = self._cache.cached(code)
        except KeyError:  # not cached: the full path looks it up
            return None
        now = utcnow()
        if target is None or not target.plain(now):
            return None  # 404 or 410, as problem+json, logged; or a visit limit to count
        try:
            trace_id = incoming_trace_id(caller.headers) or new_trace_id()
            visit = visit_of(caller, self._key, code, now, trace_id, self._trusted)
            location = destination(caller, target, self._trusted)
        except Exception:
            log.exception("fast redirect failed, answering through the app")
            return None
        if "\r" in location or "\n" in location:
            return None  # never a header here; the full path's answer says what is wrong
        self._visits.record(visit)
        return location, target.status, trace_id


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
