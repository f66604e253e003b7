"""Export jobs: request one for a link, poll it, download its CSV, cancel it. Owner only
(the admin token may cancel any job).

Another user's job or link gets the same 404 as an unknown one.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast, get_args

import msgspec
import structlog
from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    USER,
    Conflict,
    FieldError,
    NotFound,
    Route,
    TooManyRequests,
    Unprocessable,
    config,
    json_response,
    ok,
    problem,
    redis,
    ref,
    require_admin,
    require_user,
    require_user_or_admin,
    store,
    too_many,
    trace_id,
)
from sluice.app.advanced import (
    JSON,
    KEYS,
    signal_cancel,
)
from sluice.builtin.links.exports import jobs
from sluice.builtin.links.exports.job_limits import TooManyJobs
from sluice.builtin.links.exports.jobs import Job
from sluice.builtin.links.http.schemas import CODE, NO_LINK, ExportStarted, JobOut
from sluice.builtin.links.settings import LinksSettings

log = structlog.get_logger(__name__)

# When to ask again once a user's exports or imports fill their places: most finish
# within seconds.
JOBS_RETRY_AFTER = 5
ADMIN_JOBS_MAX = 100
_STATUSES: tuple[str, ...] = get_args(jobs.Status)


def _job_url(request: web.Request, job_id: str) -> str:
    return f"{config(request).base_url}/v1/jobs/{job_id}"


def _result_available(job: Job) -> bool:
    return job.status == "succeeded" and job.purged_at is None


def _out(request: web.Request, job: Job) -> JobOut:
    result_url = f"{_job_url(request, job.id)}/result" if _result_available(job) else None
    return JobOut(
        id=job.id,
        kind=job.kind,
        status=job.status,
        progress=job.progress,
        created_at=job.created_at,
        finished_at=job.finished_at,
        result_url=result_url,
        error=job.error,
    )


async def request_export(request: web.Request) -> web.Response:
    """202 with the job; while an export of the link is queued or running, that same job;
    429 while the caller has ``SLUICE_EXPORTS_PER_USER`` others queued or running."""
    user = await require_user(request)
    code = request.match_info["code"]
    per_user = LinksSettings.of(request).exports_per_user
    try:
        job, _ = await jobs.request_export(
            store(request), user.id, code, trace_id(request), per_user=per_user
        )
    except jobs.NoSuchLink:
        raise NotFound(f"you have no link {code!r}") from None
    except TooManyJobs as exc:
        raise too_many_jobs(exc) from None
    status_url = _job_url(request, job.id)
    return json_response(
        ExportStarted(job_id=job.id, status_url=status_url), 202, headers={"Location": status_url}
    )


def too_many_jobs(exc: TooManyJobs) -> TooManyRequests:
    """The 429 for a job beyond the owner's cap of its kind (SLUICE_EXPORTS_PER_USER,
    SLUICE_IMPORTS_PER_USER)."""
    setting = f"SLUICE_{exc.kind.upper()}S_PER_USER"
    return TooManyRequests(
        f"you have {exc.active} {exc.kind}s queued or running, the most allowed at once"
        f" ({setting}) is {exc.limit}; ask again when one has finished",
        JOBS_RETRY_AFTER,
    )


async def own_job(request: web.Request) -> Job:
    user = await require_user(request)
    job_id = request.match_info["job_id"]
    job = await jobs.get_job(store(request), job_id)
    if job is None or job.owner_id != user.id:
        raise NotFound(f"you have no job {job_id!r}")
    return job


async def read_job(request: web.Request) -> web.Response:
    return json_response(_out(request, await own_job(request)))


async def cancel_job(request: web.Request) -> web.Response:
    """202 with the job, ``cancelled``; 409 once it finished. The worker running it, on any
    host, stops within a second or two (``sluice.records.cancel``)."""
    user = await require_user_or_admin(request)
    job_id = request.match_info["job_id"]
    try:
        job = await jobs.cancel(store(request), job_id, None if user is None else user.id)
    except jobs.NoSuchJob:
        raise NotFound(f"{'no' if user is None else 'you have no'} job {job_id!r}") from None
    except jobs.AlreadyFinished as exc:
        raise Conflict(
            f"the job is {exc.job.status} already; only a queued or running job can be cancelled"
        ) from None
    await signal_cancel(redis(request), request.app[KEYS], job.kind, job.id)
    log.info("job cancelled", job_id=job.id, by="admin" if user is None else "owner")
    return json_response(_out(request, job), 202)


class AdminJobOut(msgspec.Struct, kw_only=True):
    """A job as the operator sees it: whose, of which link, and its trace."""

    id: str
    kind: str
    owner_id: str
    code: str
    status: jobs.Status
    progress: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    trace_id: str


def _admin_out(job: Job) -> AdminJobOut:
    return AdminJobOut(
        id=job.id,
        kind=job.kind,
        owner_id=job.owner_id,
        code=job.code,
        status=job.status,
        progress=job.progress,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        error=job.error,
        trace_id=job.trace_id,
    )


async def list_jobs(request: web.Request) -> web.Response:
    """Every user's jobs, newest first, at most ``ADMIN_JOBS_MAX``; ``?status=`` one status."""
    await require_admin(request)
    status = request.query.get("status")
    if status is not None and status not in _STATUSES:
        raise Unprocessable(
            "invalid query parameters",
            [FieldError("status", f"must be one of {', '.join(_STATUSES)}")],
        )
    found = await jobs.newest(store(request), cast("jobs.Status | None", status), ADMIN_JOBS_MAX)
    return json_response([_admin_out(job) for job in found])


JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
NO_JOB = problem("no such job, or another user's (the same answer for both)")


ROUTES = (
    Route(
        "POST",
        "/v1/links/{code}/exports",
        request_export,
        {
            "operationId": "exportLink",
            "summary": "Start a CSV export of one of the caller's links' visits",
            "description": (
                "Answers at once; the `exports` workers build the CSV in the background from the "
                "event history, covering the visits committed before the request. While an export "
                "of the link is queued or running, the same job is answered again (no second "
                "scan). A user has at most SLUICE_EXPORTS_PER_USER (default 3) exports queued or "
                "running at once; beyond that the answer is 429 and nothing is queued. Poll "
                "`status_url`; the CSV has the columns visited_at, visitor, referrer_host, "
                "browser, is_bot."
            ),
            "security": USER,
            "parameters": [CODE],
            "responses": {
                "202": {
                    **ok(ExportStarted, "the job; `Location` is its status URL"),
                    "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}},
                },
                "401": UNAUTHORIZED,
                "404": NO_LINK,
                "429": too_many(
                    "SLUICE_EXPORTS_PER_USER exports of yours are queued or running; "
                    "ask again once one has finished"
                ),
            },
        },
        structs=(ExportStarted,),
    ),
    Route(
        "GET",
        "/v1/admin/jobs",
        list_jobs,
        {
            "operationId": "adminListJobs",
            "summary": "Every user's jobs, newest first (the admin token)",
            "description": (
                f"At most {ADMIN_JOBS_MAX} jobs, newest first, of every user; `status` keeps one"
                " status. The /admin page lists the queued and running ones with a Cancel"
                " button (`DELETE /v1/jobs/{job_id}`)."
            ),
            "security": ADMIN,
            "parameters": [
                {
                    "name": "status",
                    "in": "query",
                    "required": False,
                    "description": "only jobs of this status",
                    "schema": {"type": "string", "enum": list(_STATUSES)},
                }
            ],
            "responses": {
                "200": {
                    "description": "the jobs",
                    "content": {JSON: {"schema": {"type": "array", "items": ref(AdminJobOut)}}},
                },
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "422": problem("`status` is not a job status"),
            },
        },
        structs=(AdminJobOut,),
    ),
    Route(
        "GET",
        "/v1/jobs/{job_id}",
        read_job,
        {
            "operationId": "getJob",
            "summary": "A job's status and progress (0-100, never decreasing)",
            "description": (
                "`result_url` is set once the job succeeded, until the result is removed "
                "SLUICE_EXPORT_RETENTION seconds (default a day) after `finished_at`; "
                "`error` says why a job failed."
            ),
            "security": USER,
            "parameters": [JOB_ID],
            "responses": {
                "200": ok(JobOut, "the job"),
                "401": UNAUTHORIZED,
                "404": NO_JOB,
            },
        },
        structs=(JobOut,),
    ),
    Route(
        "DELETE",
        "/v1/jobs/{job_id}",
        cancel_job,
        {
            "operationId": "cancelJob",
            "summary": "Cancel a queued or running job (its owner, or the admin token)",
            "description": (
                "The job reads `cancelled` at once and its partial result is removed; a job "
                "not yet started never runs, and the worker running one, on any host, stops "
                "within 2 s (a Redis signal polled every 0.5 s, the database read every 2 s "
                "as a fallback). Its stream entry is acked, never retried and never "
                "dead-lettered. A finished job (succeeded, failed or cancelled) is 409."
            ),
            "security": [*USER, *ADMIN],
            "parameters": [JOB_ID],
            "responses": {
                "202": ok(JobOut, "the job, now `cancelled`"),
                "401": UNAUTHORIZED,
                "404": NO_JOB,
                "409": problem("the job succeeded, failed or was cancelled already"),
                "429": too_many(
                    "this client address sent too many tokens that are neither a user's nor the"
                    " admin's (SLUICE_ADMIN_FAILURES_PER_CLIENT per window): a wrong token is"
                    " refused until Retry-After; a valid one always passes"
                ),
            },
        },
        structs=(JobOut,),
    ),
)
