"""Import links from a CSV: sluice's own columns, or an export of Bitly, YOURLS or Shlink.

The file is checked here (UTF-8, CSV, a header row naming a known format, at least
one row: 422 otherwise) and kept in the database with its job; the ``imports``
workers apply the rows (``sluice.builtin.links.imports``). The job is polled like an export, at
``GET /v1/jobs/{id}``; its result is JSON, one outcome per row.

Before any of the file is read, ``admit_upload`` (the route's ``LargeBody``) checks the
token, the content type and the caller's places (``SLUICE_IMPORTS_PER_USER``): an
upload refused is answered after its head, its connection closed with the body unread.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from sluice.app import (
    UNAUTHORIZED,
    USER,
    Route,
    Unprocessable,
    UnsupportedMediaType,
    config,
    json_response,
    ok,
    problem,
    require_user,
    store,
    too_many,
    trace_id,
)
from sluice.app.advanced import LargeBody
from sluice.builtin.links.exports.job_limits import TooManyJobs, active_jobs, check_active
from sluice.builtin.links.http.jobs import too_many_jobs
from sluice.builtin.links.http.schemas import ExportStarted
from sluice.builtin.links.imports import jobs
from sluice.builtin.links.imports.formats import Parsed, UnreadableFile, parse
from sluice.builtin.links.imports.jobs import IMPORT
from sluice.builtin.links.imports.runner import stored_fields
from sluice.builtin.links.settings import LinksSettings

CSV = "text/csv"


def _check_type(request: web.Request) -> None:
    if request.content_type != CSV or (request.charset or "utf-8").lower() not in ("utf-8", "utf8"):
        raise UnsupportedMediaType("the body must be text/csv in UTF-8 (charset=utf-8 or none)")


async def admit_upload(request: web.Request) -> None:
    """Before any of the file is read (``LargeBody``): the caller's token (401), the
    body's type (415) and a free place among the caller's imports (429)."""
    user = await require_user(request)
    _check_type(request)
    active = await active_jobs(store(request), IMPORT, user.id)
    try:
        check_active(IMPORT, active, LinksSettings.of(request).imports_per_user)
    except TooManyJobs as exc:
        raise too_many_jobs(exc) from None


async def request_import(request: web.Request) -> web.Response:
    """202 with the job; the same job while an import of the same file is queued or
    running. 413 past ``SLUICE_IMPORT_MAX_BYTES`` (the middleware), 415, 422; 429 while
    the caller has ``SLUICE_IMPORTS_PER_USER`` imports queued or running (checked again
    here: two uploads at once may both have been admitted)."""
    user = await require_user(request)
    data = await request.read()
    try:
        # Parsing 10 MB takes a moment: off the event loop.
        parsed: Parsed = await asyncio.to_thread(parse, data, stored=stored_fields())
    except UnreadableFile as exc:
        raise Unprocessable(str(exc)) from None
    try:
        job, _ = await jobs.request_import(
            store(request),
            user.id,
            data,
            parsed.format.name,
            len(parsed.drafts),
            trace_id(request),
            per_user=LinksSettings.of(request).imports_per_user,
        )
    except TooManyJobs as exc:
        raise too_many_jobs(exc) from None
    status_url = f"{config(request).base_url}/v1/jobs/{job.id}"
    return json_response(
        ExportStarted(job_id=job.id, status_url=status_url), 202, headers={"Location": status_url}
    )


ROUTES = (
    Route(
        "POST",
        "/v1/links/imports",
        request_import,
        large_body=LargeBody(
            lambda config: LinksSettings.of(config).import_max_bytes, admit_upload
        ),
        doc={
            "operationId": "importLinks",
            "summary": "Import links from a CSV file, in the background",
            "description": (
                "The format is told by the header row (names compared without case, spaces, `_`"
                " or `-`): sluice's own `url, alias, expires_at, tags, title` (only `url`"
                " required), or an export of YOURLS (`keyword, url, title, ...`), Shlink"
                " (`shortCode, longUrl, title, tags, ...`) or Bitly (`link, long_url, title,"
                " tags, ...`). Every row goes by the rules of POST /v1/links. Answers at once;"
                " poll `status_url`: the job's result (`result_url`) is JSON, one outcome per row"
                " (`created`, `existing` or `invalid` with the reason). Importing the same file"
                " again creates nothing twice: a row with a code is `existing` when the caller's"
                " link with that code goes to the same URL, a row without one when an import of"
                " the caller created a link to the same URL. Uploading the same file while its"
                " import is queued or running answers that same job. A user has at most"
                " SLUICE_IMPORTS_PER_USER (default 3) imports queued or running at once; the"
                " token, the content type and that cap are checked before any of the file is"
                " read, and a refused upload is answered at once with its connection closed."
                " Every link counts against SLUICE_LINKS_PER_USER: rows beyond it are"
                " `invalid`."
            ),
            "security": USER,
            "requestBody": {"required": True, "content": {CSV: {"schema": {"type": "string"}}}},
            "responses": {
                "202": {
                    **ok(ExportStarted, "the job; `Location` is its status URL"),
                    "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}},
                },
                "400": problem("the body cannot be read"),
                "401": UNAUTHORIZED,
                "413": problem(
                    "the file is larger than SLUICE_IMPORT_MAX_BYTES (10 MiB by default)"
                ),
                "415": problem("the body is not text/csv in UTF-8"),
                "422": problem("not UTF-8, not CSV, a header row of no known format, or no rows"),
                "429": too_many(
                    "SLUICE_IMPORTS_PER_USER imports of yours are queued or running;"
                    " upload again once one has finished (the file is not read)"
                ),
            },
        },
        structs=(ExportStarted,),
    ),
)
