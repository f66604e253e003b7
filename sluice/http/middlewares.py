"""The request middleware: trace id and log context, errors as problem+json, one summary line.

One middleware, not a chain of two, and as little work per request as it can
be: the redirect goes through it too, and it is the hottest path of the API.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import istr

from sluice.errors import DependencyDown, ProblemError, RequestTimeout
from sluice.events import TRACE, new_trace_id
from sluice.http.app_keys import CONFIG, LARGE_BODIES, QUIET, TRACE_ID
from sluice.http.bodies import buffer_body, close_with
from sluice.http.body_limits import large_body
from sluice.http.degrade import unavailable
from sluice.http.problems import from_http_exception, problem_response
from sluice.telemetry import logs, tracing
from sluice.telemetry.logs import REQUEST
from sluice.telemetry.prometheus import REQUEST_TALLY

log = structlog.get_logger(__name__)

# W3C trace context: version-traceid-parentid-flags; an all-zero trace id is invalid.
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
# Request ids from clients and proxies: a safe alphabet only, since they end up in log lines.
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{7,127}")
_TRACEPARENT_HEADER = istr("traceparent")
_REQUEST_ID_HEADER = istr("X-Request-ID")
TRACE_ID_HEADER = istr("X-Trace-Id")


def incoming_trace_id(headers: Mapping[str, str]) -> str | None:
    """The trace a W3C ``traceparent`` continues, if well-formed. Never ``X-Request-ID``:
    any client picks one, often not unique, and as a trace id it would put unrelated
    requests into one trace in /admin; it is logged as ``request_id`` instead."""
    traceparent = headers.get(_TRACEPARENT_HEADER)
    if traceparent is not None:
        match = _TRACEPARENT.fullmatch(traceparent.strip().lower())
        if match and match[1] != "0" * 32:
            return match[1]
    return None


def client_request_id(headers: Mapping[str, str]) -> str | None:
    """The caller's ``X-Request-ID`` if well-formed: logged beside the trace id."""
    request_id = headers.get(_REQUEST_ID_HEADER)
    if request_id is not None and _REQUEST_ID.fullmatch(request_id := request_id.strip()):
        return request_id
    return None


async def _with_body(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's answer once the body is read; else, sent at once with the connection
    closed after it, the refusal of a route that takes a large body (``body_limits``:
    its body is not read at all) or the 408 for a body that did not arrive in time."""
    large = large_body(request, request.app[LARGE_BODIES])
    if large is not None:
        try:
            await large.admit(request)  # credentials and limits before any of the body
        except ProblemError as exc:
            return await _answer_and_close(request, exc)
        request = request.clone(client_max_size=large.limit(request.app[CONFIG]))
    try:
        await buffer_body(request, request.app[CONFIG].body_timeout_seconds)
    except RequestTimeout as exc:
        return await _answer_and_close(request, exc)
    return await handler(request)


async def _answer_and_close(request: web.Request, exc: ProblemError) -> web.StreamResponse:
    response = problem_response(
        exc.status, exc.detail, title=exc.title, errors=exc.errors, headers=exc.headers
    )
    response.headers[TRACE_ID_HEADER] = request[TRACE_ID]
    await close_with(request, response)
    return response


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Trace id and log context for the request, problem+json for every failure, and one
    summary line at the end; an unexpected failure is logged once, as a 500."""
    # With tracing on, the request's SERVER span, continuing a caller's traceparent.
    span = tracing.Server(request) if tracing.ENABLED else None
    trace_id = (
        span.trace_id if span is not None else incoming_trace_id(request.headers) or new_trace_id()
    )
    request[TRACE_ID] = trace_id
    TRACE.set(trace_id)  # the request's own task: events it makes join its trace
    request_id = client_request_id(request.headers)
    token = REQUEST.set((trace_id, request.method, request.path, request_id))
    started = time.perf_counter()
    status = 500
    error: BaseException | None = None
    try:
        try:
            if request.body_exists:
                response = await _with_body(request, handler)
            else:
                response = await handler(request)
        except ProblemError as exc:
            response = problem_response(
                exc.status, exc.detail, title=exc.title, errors=exc.errors, headers=exc.headers
            )
        except web.HTTPException as exc:
            if exc.status < 400:  # a raised redirect, say: aiohttp sends it as is
                status = exc.status
                exc.headers[TRACE_ID_HEADER] = trace_id
                raise
            response = from_http_exception(request, exc)
        except asyncio.CancelledError:
            status = 499  # the client went away before the answer
            raise
        except Exception as exc:
            if (dependency := unavailable(exc)) is not None:
                log.exception("dependency unavailable", dependency=dependency)
                detail = f"{dependency} is unavailable; try again later"
                retry = {"Retry-After": str(DependencyDown.RETRY_AFTER)}
                response = problem_response(503, detail, headers=retry)
            else:
                error = exc
                log.exception("unhandled error")
                response = problem_response(500, "the server failed to answer this request")
        status = response.status
        if not response.prepared:
            response.headers[TRACE_ID_HEADER] = trace_id
        return response
    finally:
        _summarize(request, status, time.perf_counter() - started)
        REQUEST.reset(token)
        if span is not None:
            span.end(status, error)


def _summarize(request: web.Request, status: int, seconds: float) -> None:
    """The request line (none for a redirect that recorded its visit: the visit is its
    record, docs/design/redirects.md) and the request's tally for ``/metrics``."""
    if not request.get(QUIET):
        duration_ms = round(seconds * 1000, 2)
        if logs.request_line is not None:
            logs.request_line(status, duration_ms)
        else:
            log.info("request", status=status, duration_ms=duration_ms)
    # By route pattern (``/{code}``, not the path): bounded label values.
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    REQUEST_TALLY.add(request.method, route, status, seconds)
