"""Request middlewares: per-request log context and trace id, errors as problem+json."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Mapping

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from sluice.errors import ProblemError
from sluice.http.keys import TRACE_ID
from sluice.http.problems import from_http_exception, problem_response

log = structlog.get_logger(__name__)

# W3C trace context: version-traceid-parentid-flags; an all-zero trace id is invalid.
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
# Request ids from proxies: a safe alphabet only, since they end up in every log line.
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{7,127}")


def incoming_trace_id(headers: Mapping[str, str]) -> str | None:
    """The caller's trace id (``traceparent`` first, then ``X-Request-ID``) if well-formed."""
    match = _TRACEPARENT.fullmatch(headers.get("traceparent", "").strip().lower())
    if match and match[1] != "0" * 32:
        return match[1]
    request_id = headers.get("X-Request-ID", "").strip()
    if _REQUEST_ID.fullmatch(request_id):
        return request_id
    return None


@web.middleware
async def request_logging(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bind ``trace_id``, method and path for the request's logs; one summary line at the end."""
    trace_id = incoming_trace_id(request.headers) or uuid.uuid4().hex
    request[TRACE_ID] = trace_id
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(
        trace_id=trace_id, method=request.method, path=request.path
    )
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        if not response.prepared:
            response.headers["X-Trace-Id"] = trace_id
        return response
    except web.HTTPException as exc:  # a raised redirect, say: aiohttp sends it as is
        status = exc.status
        exc.headers["X-Trace-Id"] = trace_id
        raise
    except asyncio.CancelledError:
        status = 499  # the client went away before the answer
        raise
    finally:
        duration_ms = round((time.perf_counter() - started) * 1000, 2)
        log.info("request", status=status, duration_ms=duration_ms)


@web.middleware
async def problems(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every failure with problem+json; an unexpected one is logged once, as a 500."""
    try:
        return await handler(request)
    except ProblemError as exc:
        return problem_response(
            exc.status, exc.detail, title=exc.title, errors=exc.errors, headers=exc.headers
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return from_http_exception(request, exc)
    except Exception:
        log.exception("unhandled error")
        return problem_response(500, "the server failed to answer this request")
