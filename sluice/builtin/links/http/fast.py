"""The links app's answers on the core's fast path (``sluice.http.fast_redirect``, and on
the wire, ``sluice.http.redirect_wire``): ``GET /{code}`` of a cached, live, plain link,
its visit recorded, without the router. Declared with ``App.fast_path``."""

from __future__ import annotations

import structlog
from aiohttp import web

from sluice.app import new_trace_id, utcnow
from sluice.app.advanced import (
    VISITOR_KEY,
    Caller,
    RedirectSpan,
    incoming_trace_id,
    other_routes,
    tracing,
)
from sluice.builtin.links.http.keys import LINK_CACHE, VISITS
from sluice.builtin.links.http.redirects import CODE, TRUSTED_PROXIES, destination, visit_of

log = structlog.get_logger(__name__)


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
        # With tracing on, the redirect's SERVER span, made here: the middleware never
        # sees this request. Dropped unended (never exported) if the full path answers.
        span = None
        try:
            location = destination(caller, target, self._trusted)
            if "\r" in location or "\n" in location:
                return None  # never a header here; the full path's answer says what is wrong
            if tracing.ENABLED:
                span = RedirectSpan(f"/{code}", caller.headers, caller.remote)
                trace_id = span.trace_id
            else:
                trace_id = incoming_trace_id(caller.headers) or new_trace_id()
            visit = visit_of(caller, self._key, code, now, trace_id, self._trusted)
        except Exception:
            log.exception("fast redirect failed, answering through the app")
            return None
        if span is None:
            self._visits.record(visit)
        else:  # the visit is stored under the redirect's span (docs/guides/tracing.md)
            self._visits.record(visit, traceparent=span.traceparent)
            span.end(target.status)
        return location, target.status, trace_id
