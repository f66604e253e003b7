"""Export jobs: request one for a link, poll it, download its CSV. Owner only.

Another user's job or link gets the same 404 as an unknown one.
"""

from __future__ import annotations

import asyncio
import os

from aiohttp import hdrs, web

from sluice.errors import Conflict, Gone, NotFound, RangeNotSatisfiable
from sluice.exports import jobs
from sluice.exports.files import exports_dir
from sluice.exports.jobs import Job
from sluice.http.auth import require_user
from sluice.http.bodies import json_response
from sluice.http.keys import CONFIG, STORE, TRACE_ID
from sluice.http.schemas import ExportStarted, JobOut


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
    """202 with the job; while an export of the link is queued or running, that same job."""
    user = await require_user(request)
    code = request.match_info["code"]
    try:
        job, _ = await jobs.request_export(request.app[STORE], user.id, code, request[TRACE_ID])
    except jobs.NoSuchLink:
        raise NotFound(f"you have no link {code!r}") from None
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
    """The CSV once the job succeeded; 409 before (or after a failure), 410 once removed."""
    job = await _own_job(request)
    if job.purged_at is not None:
        raise Gone("the result was removed after the retention period; request a new export")
    if job.status != "succeeded" or job.result_path is None:
        detail = f"the job is {job.status}"
        raise Conflict(f"{detail}: {job.error}" if job.error else f"{detail}; no result yet")
    path = exports_dir(request.app[CONFIG]) / job.result_path
    try:
        stat = await asyncio.to_thread(path.stat)
    except FileNotFoundError:
        raise Gone("the result file is no longer there; request a new export") from None
    _check_range(request, stat)
    filename = f"{job.code}-visits-{job.created_at:%Y%m%dT%H%M%SZ}.csv"
    return web.FileResponse(
        path,
        headers={
            "Content-Type": "text/csv; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{filename}"',
        },
    )


_CONDITIONS = (hdrs.IF_MATCH, hdrs.IF_NONE_MATCH, hdrs.IF_MODIFIED_SINCE, hdrs.IF_UNMODIFIED_SINCE)


def _check_range(request: web.Request, stat: os.stat_result) -> None:
    """A ``Range`` that ``FileResponse`` would answer with its bare 416 (an empty body) gets
    the 416 as a problem document: the same decision, made first. ``FileResponse`` then
    serves every range that passes (206) as it does."""
    headers = request.headers
    if hdrs.RANGE not in headers or any(h in headers for h in _CONDITIONS):
        return  # conditions come first (RFC 9110 13.2.2): FileResponse decides it all
    if_range = request.if_range
    if if_range is not None and stat.st_mtime > if_range.timestamp():
        return  # the copy the client holds is older: the whole file, 200
    size = stat.st_size
    try:
        asked = request.http_range
    except ValueError:
        raise RangeNotSatisfiable(
            "the Range header is not a single byte range 'bytes=first-last'", size
        ) from None
    start = asked.start
    if start is not None and start < 0 and asked.stop is None:
        start = max(0, start + size)  # the last bytes: 'bytes=-500'
    if start is not None and start >= size:
        raise RangeNotSatisfiable(f"the range starts past the end of the {size}-byte file", size)
