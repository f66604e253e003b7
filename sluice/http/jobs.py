"""Export jobs: request one for a link, poll it, download its CSV. Owner only.

Another user's job or link gets the same 404 as an unknown one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import structlog
from aiohttp import hdrs, web

from sluice.errors import Conflict, Gone, NotFound, TooManyRequests
from sluice.exports import chunks, jobs
from sluice.exports.jobs import Job
from sluice.http.auth import require_user
from sluice.http.bodies import json_response
from sluice.http.conditional import Validators, not_modified, requested_range
from sluice.http.keys import CONFIG, STORE, TRACE_ID
from sluice.http.schemas import ExportStarted, JobOut

log = structlog.get_logger(__name__)

# When to ask again once a user's exports fill their places: most finish within seconds.
EXPORTS_RETRY_AFTER = 5


def _job_url(request: web.Request, job_id: str) -> str:
    return f"{request.app[CONFIG].base_url}/v1/jobs/{job_id}"


def _result_available(job: Job) -> bool:
    return job.status == "succeeded" and job.purged_at is None


def _out(request: web.Request, job: Job) -> JobOut:
    result_url = f"{_job_url(request, job.id)}/result" if _result_available(job) else None
    return JobOut(
        id=job.id, kind=job.kind, status=job.status,
        progress=job.progress, created_at=job.created_at, finished_at=job.finished_at,
        result_url=result_url, error=job.error,
    )  # fmt: skip


async def request_export(request: web.Request) -> web.Response:
    """202 with the job; while an export of the link is queued or running, that same job;
    429 while the caller has ``SLUICE_EXPORTS_PER_USER`` others queued or running."""
    user = await require_user(request)
    code = request.match_info["code"]
    per_user = request.app[CONFIG].exports_per_user
    try:
        job, _ = await jobs.request_export(
            request.app[STORE], user.id, code, request[TRACE_ID], per_user=per_user
        )
    except jobs.NoSuchLink:
        raise NotFound(f"you have no link {code!r}") from None
    except jobs.TooManyExports as exc:
        raise TooManyRequests(
            f"you have {exc.active} exports queued or running, the most allowed at once is"
            f" {exc.limit}; ask again when one has finished",
            EXPORTS_RETRY_AFTER,
        ) from None
    status_url = _job_url(request, job.id)
    return json_response(
        ExportStarted(job_id=job.id, status_url=status_url), 202, headers={"Location": status_url}
    )


async def _own_job(request: web.Request) -> Job:
    user = await require_user(request)
    job_id = request.match_info["job_id"]
    job = await jobs.get_job(request.app[STORE], job_id)
    if job is None or job.owner_id != user.id:
        raise NotFound(f"you have no job {job_id!r}")
    return job


async def read_job(request: web.Request) -> web.Response:
    return json_response(_out(request, await _own_job(request)))


async def job_result(request: web.Request) -> web.StreamResponse:
    """The CSV once the job succeeded; 409 before (or after a failure), 410 once removed.

    Read from the database a chunk at a time, so any process serves any job's
    result; validators and ranges as RFC 9110 has them (``http.conditional``).
    """
    job = await _own_job(request)
    if job.purged_at is not None:
        raise Gone("the result was removed after the retention period; request a new export")
    if job.status != "succeeded" or job.finished_at is None:
        detail = f"the job is {job.status}"
        raise Conflict(f"{detail}: {job.error}" if job.error else f"{detail}; no result yet")
    # A result never changes once its job succeeded: the job and the size name it.
    current = Validators(f"{job.id}-{job.cursor_bytes:x}", job.finished_at, job.cursor_bytes)
    if not_modified(request, current):
        return web.Response(status=304, headers=current.headers())
    span = requested_range(request, current)
    start, stop = span or (0, current.size)
    async with contextlib.aclosing(chunks.read(request.app[STORE], job.id, start, stop)) as body:
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
    filename = f"{job.code}-visits-{job.created_at:%Y%m%dT%H%M%SZ}.csv"
    response.headers.update({
        **current.headers(),
        hdrs.CONTENT_TYPE: "text/csv; charset=utf-8",
        hdrs.CONTENT_DISPOSITION: f'attachment; filename="{filename}"',
        "X-Trace-Id": request[TRACE_ID],  # prepared in the view: the middleware cannot add it
    })  # fmt: skip
    if span is not None:
        response.headers[hdrs.CONTENT_RANGE] = f"bytes {start}-{stop - 1}/{current.size}"
    response.content_length = stop - start
    return response


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
