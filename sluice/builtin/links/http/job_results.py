"""The download of a job's result (an export's CSV, an import's JSON): validators and
byte ranges as RFC 9110 has them, read from the database a chunk at a time."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import structlog
from aiohttp import hdrs, web

from sluice.app import UNAUTHORIZED, USER, Conflict, Gone, Route, problem, store, trace_id
from sluice.app.advanced import (
    JSON,
    Doc,
    Validators,
    not_modified,
    requested_range,
)
from sluice.builtin.links.exports import chunks
from sluice.builtin.links.exports.jobs import Job
from sluice.builtin.links.http.jobs import JOB_ID, NO_JOB, own_job
from sluice.builtin.links.imports.jobs import IMPORT

# Its lines name the logger they had before this module was split off.
log = structlog.get_logger("sluice.builtin.links.http.jobs")


async def job_result(request: web.Request) -> web.StreamResponse:
    """The CSV once the job succeeded; 409 before (or after a failure), 410 once removed.

    Read from the database a chunk at a time, so any process serves any job's
    result; validators and ranges as RFC 9110 has them (``http.conditional``).
    """
    job = await own_job(request)
    if job.purged_at is not None:
        raise Gone("the result was removed after the retention period; request a new export")
    if job.cancelled:
        raise Conflict("the job was cancelled: it has no result")
    if job.status != "succeeded" or job.finished_at is None:
        detail = f"the job is {job.status}"
        raise Conflict(f"{detail}: {job.error}" if job.error else f"{detail}; no result yet")
    # A result never changes once its job succeeded: the job and the size name it.
    current = Validators(f"{job.id}-{job.cursor_bytes:x}", job.finished_at, job.cursor_bytes)
    if not_modified(request, current):
        return web.Response(status=304, headers=current.headers())
    span = requested_range(request, current)
    start, stop = span or (0, current.size)
    async with contextlib.aclosing(chunks.read(store(request), job.id, start, stop)) as body:
        try:
            first = await anext(body, None)  # before the status line: a failure is still a 5xx
        except chunks.ResultMissing:
            raise Gone("the result is no longer there; request a new export") from None
        response = _csv_response(request, job, current, span)
        await response.prepare(request)
        if request.method != hdrs.METH_HEAD and first is not None:
            await _send(request, response, job.id, first, body)
    return response


def _csv_response(
    request: web.Request, job: Job, current: Validators, span: tuple[int, int] | None
) -> web.StreamResponse:
    """The status line and headers: 200 for the whole CSV, 206 for ``span``."""
    start, stop = span or (0, current.size)
    response = web.StreamResponse(status=200 if span is None else 206)
    content_type, filename = _result_type(job)
    response.headers.update(
        {
            **current.headers(),
            hdrs.CONTENT_TYPE: content_type,
            hdrs.CONTENT_DISPOSITION: f'attachment; filename="{filename}"',
            "X-Trace-Id": trace_id(request),  # prepared in the view: the middleware cannot add it
        }
    )
    if span is not None:
        response.headers[hdrs.CONTENT_RANGE] = f"bytes {start}-{stop - 1}/{current.size}"
    response.content_length = stop - start
    return response


def _result_type(job: Job) -> tuple[str, str]:
    """The result's content type and file name: an export's CSV, an import's JSON."""
    created = f"{job.created_at:%Y%m%dT%H%M%SZ}"
    if job.kind == IMPORT:
        return "application/json", f"import-{created}.json"
    return "text/csv; charset=utf-8", f"{job.code}-visits-{created}.csv"


async def _send(
    request: web.Request,
    response: web.StreamResponse,
    job_id: str,
    first: memoryview,
    rest: AsyncIterator[memoryview],
) -> None:
    """Write the body; a failure past the status line can only cut the connection, so
    the client sees the body end short of its ``Content-Length``."""
    try:
        await response.write(first)
        async for data in rest:
            await response.write(data)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away
    except Exception:
        log.exception("export download broken off", job_id=job_id)
        if request.transport is not None:
            request.transport.close()


def _required_header(description: str, schema: Doc | None = None) -> Doc:
    return {"description": description, "required": True, "schema": schema or {"type": "string"}}


_RESULT_HEADERS = {
    "Content-Disposition": _required_header(
        '`attachment; filename="<code>-visits-<created>.csv"` (an import: `import-<created>.json`)'
    ),
    "Content-Length": _required_header("bytes in this answer", {"type": "integer", "minimum": 0}),
    "ETag": _required_header("strong: the result never changes"),
    "Last-Modified": _required_header("the job's `finished_at`"),
    "Accept-Ranges": _required_header("byte ranges are served", {"const": "bytes"}),
}
_RESULT_CONDITIONS = [
    {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }
    for name, description in (
        ("Range", "one byte range: `bytes=first-`, `bytes=first-last` or `bytes=-suffix`"),
        ("If-Range", "an ETag or an HTTP date: the Range applies only to that very version"),
        ("If-Match", "ETags, or `*`: 412 unless one is the result's (strong comparison)"),
        ("If-None-Match", "ETags, or `*`: 304 when one is the result's (weak comparison)"),
        ("If-Modified-Since", "an HTTP date: 304 unless the result is newer"),
        ("If-Unmodified-Since", "an HTTP date: 412 when the result is newer"),
    )
]

ROUTES = (
    Route(
        "GET",
        "/v1/jobs/{job_id}/result",
        job_result,
        {
            "operationId": "getJobResult",
            "summary": "The result of a job that succeeded: an export's CSV, an import's JSON",
            "description": (
                "The result is kept in the database, so any replica serves it, read a chunk at a "
                "time. It never changes once the job succeeded: its `ETag` is strong and its "
                "`Last-Modified` is the job's `finished_at`. Conditions are evaluated as RFC 9110 "
                "section 13.2.2 orders them (If-Match, else If-Unmodified-Since: 412; "
                "If-None-Match, else If-Modified-Since: 304) before a `Range` is looked at. One "
                "byte range is served (`bytes=10-`, `bytes=10-99`, `bytes=-500`); an `If-Range` "
                "naming another version (a weak or other tag, a date other than Last-Modified) "
                "gets the whole CSV, as does a Range in a unit other than bytes (ignored, RFC "
                "9110 section 14.2)."
            ),
            "security": USER,
            "parameters": [JOB_ID, *_RESULT_CONDITIONS],
            "responses": {
                "200": {
                    "description": "the CSV (RFC 4180, UTF-8, a header line), as an attachment",
                    "headers": _RESULT_HEADERS,
                    "content": {
                        "text/csv": {"schema": {"type": "string"}},
                        JSON: {
                            "schema": {
                                "type": "object",
                                "description": ("an import's outcomes (see importLinks)"),
                            }
                        },
                    },
                },
                "206": {
                    "description": "the part of the CSV a Range header asked for",
                    "headers": {
                        **_RESULT_HEADERS,
                        "Content-Range": _required_header("`bytes first-last/size`"),
                    },
                    "content": {"text/csv": {"schema": {"type": "string"}}},
                },
                "304": {
                    "description": (
                        "If-None-Match or If-Modified-Since: the client's copy is current"
                    ),
                    "headers": {name: _RESULT_HEADERS[name] for name in ("ETag", "Last-Modified")},
                },
                "401": UNAUTHORIZED,
                "404": NO_JOB,
                "409": problem("the job is queued, running, failed or cancelled: no result"),
                "410": problem("the result was removed after the retention period"),
                "412": problem(
                    "If-Match names another version, or the result changed after "
                    "If-Unmodified-Since"
                ),
                "416": {
                    **problem(
                        "a byte Range that starts past the end, is empty or backwards, "
                        "or is not one byte range"
                    ),
                    "headers": {"Content-Range": _required_header("`bytes */size`")},
                },
            },
        },
    ),
)
