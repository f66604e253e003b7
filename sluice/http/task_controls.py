"""Admin controls of scheduled tasks (docs/guides/tasks.md): pause, resume, cancel a run, backfill.

- Pause and resume answer 204 and are idempotent (a row of ``paused_tasks``,
  sluice/scheduler/pauses.py): the replica that claims an occurrence of a
  paused task records it ``skipped`` with the error ``paused``.
- Cancel sets the run's cancel signal (``sluice.records.cancel``); its runner,
  on whichever host, polls it every half second, stops the run and records it
  ``cancelled``: within 2 s. 404 for a run of another task or none, 409 when the
  run is not running.
- Backfill runs each occurrence of ``[from, to]`` once, oldest first, one after
  the other, trigger ``backfill``, in this API process, in the background (a
  restart of the process drops the rest: ask again, what ran is not run again).
  An occurrence that already ran (cron, catch-up or an earlier backfill) is not
  run again: the run records' unique index. ``to`` may not be in the future
  (those occurrences are the scheduler's), and at most ``BACKFILL_MAX``
  occurrences are taken: 422 beyond, so a mistyped year does not queue a
  million runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import msgspec
import structlog
from aiohttp import web

from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait
from sluice.errors import Conflict, DependencyDown, FieldError, NotFound, Unprocessable
from sluice.events import utcnow
from sluice.http.app_keys import KEYS, REDIS, STORE, TASK_RUNNER
from sluice.http.auth import require_admin
from sluice.http.bodies import json_response, read_json
from sluice.http.route_docs import (
    ADMIN,
    BAD_BODY,
    FORBIDDEN,
    UNAUTHORIZED,
    Route,
    ok,
    problem,
    request_body,
)
from sluice.http.task_routes import task_named
from sluice.records.cancel import signal_cancel
from sluice.scheduler import pauses, runs
from sluice.scheduler.catchup import occurrences
from sluice.scheduler.runner import CANCEL_KIND, AlreadyRan, Busy, Runner
from sluice.scheduler.task_spec import Task

log = structlog.get_logger(__name__)

BACKFILL_MAX = 1000
EPOCH_YEAR = 1970
# How often a backfill waiting for the task's lock tries it again.
LOCK_POLL_S = 0.2
_TICK = timedelta(microseconds=1)  # occurrences() starts after its start: 'from' is in
BACKFILLS = web.AppKey("task_backfills", set[asyncio.Task[None]])


class Backfill(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    start: datetime = msgspec.field(name="from")
    end: datetime = msgspec.field(name="to")


class BackfillStarted(msgspec.Struct, frozen=True):
    occurrences: int
    first: datetime | None
    last: datetime | None


async def backfills(app: web.Application) -> AsyncIterator[None]:
    """Backfills still going at shutdown are cancelled (their run is recorded interrupted)."""
    jobs: set[asyncio.Task[None]] = set()
    app[BACKFILLS] = jobs
    try:
        yield
    finally:
        for job in list(jobs):
            await cancel_and_wait(job)


async def pause_task(request: web.Request) -> web.Response:
    await require_admin(request)
    await pauses.pause(request.app[STORE], task_named(request).name, utcnow())
    return web.Response(status=204)


async def resume_task(request: web.Request) -> web.Response:
    await require_admin(request)
    await pauses.resume(request.app[STORE], task_named(request).name)
    return web.Response(status=204)


async def cancel_run(request: web.Request) -> web.Response:
    await require_admin(request)
    task = task_named(request)
    run_id = request.match_info["run_id"]
    record = await runs.get(request.app[STORE], run_id)
    if record is None or record.task != task.name:
        raise NotFound(f"no run {run_id!r} of {task.name!r}")
    if record.status != "running":
        raise Conflict(f"run {run_id!r} is not running (it is {record.status})")
    if not await signal_cancel(request.app[REDIS], request.app[KEYS], CANCEL_KIND, run_id):
        raise DependencyDown("Redis does not answer; without it the run loses its lock anyway")
    log.info("task run cancel requested", task=task.name, run_id=run_id)
    return json_response(record, 202)


def _slots(task: Task, body: Backfill, now: datetime) -> list[datetime]:
    errors = []
    for field, moment in (("from", body.start), ("to", body.end)):
        if moment.tzinfo is None:
            errors.append(FieldError(field, "must be an RFC 3339 instant with its offset"))
    if errors:
        raise Unprocessable("invalid backfill range", errors)
    if body.start.year < EPOCH_YEAR:  # no task's schedule reaches before it
        raise Unprocessable("invalid backfill range", [FieldError("from", "must be after 1970")])
    if body.start > body.end:
        raise Unprocessable("invalid backfill range", [FieldError("to", "must not be before from")])
    if body.end > now:
        raise Unprocessable("invalid backfill range", [FieldError("to", "must not be future")])
    # One more than allowed, to tell "exactly the bound" from "beyond it".
    slots = occurrences(task, body.start - _TICK, body.end, BACKFILL_MAX + 1, oldest=True)
    if len(slots) > BACKFILL_MAX:
        raise Unprocessable(
            f"the range holds more than {BACKFILL_MAX} occurrences; backfill it in parts",
            [FieldError("to", f"at most {BACKFILL_MAX} occurrences from 'from'")],
        )
    return slots


async def _run_each(runner: Runner, task: Task, slots: list[datetime]) -> None:
    ran = already = 0
    for slot in slots:
        while True:
            try:
                run = await runner.begin(task, "backfill", slot)
            except Busy:
                await asyncio.sleep(LOCK_POLL_S)  # a run in progress: the backfill queues
                continue
            except AlreadyRan:
                already += 1
                break
            except (*REDIS_DOWN, Exception) as exc:
                log.warning(
                    "backfill stopped",
                    task=task.name,
                    error=repr(exc),
                    scheduled_for=slot.isoformat(),
                )
                return
            await runner.execute(run)
            ran += 1
            break
    log.info("backfill done", task=task.name, ran=ran, already_ran=already)


async def backfill(request: web.Request) -> web.Response:
    await require_admin(request)
    body = await read_json(request, Backfill)  # a broken body is 400 before anything else
    task = task_named(request)
    slots = _slots(task, body, utcnow())
    job = asyncio.create_task(
        _run_each(request.app[TASK_RUNNER], task, slots), name=f"backfill:{task.name}"
    )
    request.app[BACKFILLS].add(job)
    job.add_done_callback(request.app[BACKFILLS].discard)
    log.info("backfill started", task=task.name, occurrences=len(slots))
    started = BackfillStarted(
        occurrences=len(slots),
        first=slots[0] if slots else None,
        last=slots[-1] if slots else None,
    )
    return json_response(started, 202)


_TASK_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
_ANSWERS = {"401": UNAUTHORIZED, "403": FORBIDDEN, "404": problem("no task has this name")}

ROUTES = (
    Route(
        "POST",
        "/v1/admin/tasks/{name}/pause",
        pause_task,
        {
            "operationId": "pauseTask",
            "summary": (
                "Pause a task: its occurrences are recorded skipped (paused), on every replica"
            ),
            "description": "Idempotent; kept across restarts. A run in progress finishes.",
            "security": ADMIN,
            "parameters": [_TASK_NAME],
            "responses": {"204": {"description": "the task is paused"}, **_ANSWERS},
        },
    ),
    Route(
        "POST",
        "/v1/admin/tasks/{name}/resume",
        resume_task,
        {
            "operationId": "resumeTask",
            "summary": "Resume a paused task: its next occurrences run",
            "security": ADMIN,
            "parameters": [_TASK_NAME],
            "responses": {"204": {"description": "the task runs again"}, **_ANSWERS},
        },
    ),
    Route(
        "POST",
        "/v1/admin/tasks/{name}/runs/{run_id}/cancel",
        cancel_run,
        {
            "operationId": "cancelTaskRun",
            "summary": "Stop a running run, on whichever host runs it, within 2 s",
            "description": "The run is recorded cancelled and its lock goes back.",
            "security": ADMIN,
            "parameters": [_TASK_NAME, _RUN_ID],
            "responses": {
                "202": ok(runs.RunRecord, "the cancel was signalled; the record as it was"),
                **_ANSWERS,
                "404": problem("no task has this name, or the run is not one of its runs"),
                "409": problem("the run is not running"),
                "503": problem("Redis does not answer"),
            },
        },
        structs=(runs.RunRecord,),
    ),
    Route(
        "POST",
        "/v1/admin/tasks/{name}/backfill",
        backfill,
        {
            "operationId": "backfillTask",
            "summary": "Run each occurrence of a past range once, oldest first (trigger backfill)",
            "description": (
                f"At most {BACKFILL_MAX} occurrences; one that already ran is not run again."
                " The runs happen one after the other in the background, in this process."
            ),
            "security": ADMIN,
            "parameters": [_TASK_NAME],
            "requestBody": request_body(Backfill),
            "responses": {
                "202": ok(BackfillStarted, "the backfill started"),
                **BAD_BODY,
                **_ANSWERS,
                "422": problem(
                    f"from after to, to in the future, or more than {BACKFILL_MAX} occurrences"
                ),
            },
        },
        structs=(Backfill, BackfillStarted),
    ),
)
