"""Admin routes for scheduled tasks: list them, run one now, read its run records.

A manual run goes through the scheduler's own code path (``Runner``): the same
lock, so it never overlaps a scheduled run of the task on any replica (409
while one is in progress), and the same run record. It runs in this API
process, in the background; the 202 answer carries its run id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import msgspec
import structlog
from aiohttp import web

from sluice.aio.waiting import cancel_and_wait
from sluice.errors import Conflict, DependencyDown, FieldError, NotFound, Unprocessable
from sluice.events import utcnow
from sluice.http.app_keys import APPS, CONFIG, KEYS, REDIS, STORE, TASK_RUNNER, TASKS
from sluice.http.auth import require_admin
from sluice.http.bodies import JSON, json_response, query_limit
from sluice.http.degrade import REDIS_ERRORS, REDIS_TIMEOUT
from sluice.http.route_docs import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    Route,
    limit_query,
    ok,
    problem,
    ref,
)
from sluice.process.resources import Resources
from sluice.scheduler import runs
from sluice.scheduler.loop import default_holder
from sluice.scheduler.pauses import paused_tasks
from sluice.scheduler.policy import Policy
from sluice.scheduler.runner import AlreadyRan, Busy, Runner
from sluice.scheduler.task_spec import Task

log = structlog.get_logger(__name__)

RUNS_DEFAULT = 20
RUNS_MAX = 200
BACKGROUND = web.AppKey("task_runs_in_background", set[asyncio.Task[runs.RunRecord]])


class TaskInfo(msgspec.Struct, frozen=True):
    name: str
    cron: str
    timezone: str
    next_run: datetime | None
    last_run: runs.RunRecord | None
    description: str
    # docs/guides/tasks.md: SLUICE_<TASK>_OVERLAP etc. as this process read them; paused_at when
    # paused.
    policy: Policy
    paused: bool
    paused_at: datetime | None


class RunStarted(msgspec.Struct, frozen=True):
    run_id: str
    trace_id: str


async def task_runner(app: web.Application) -> AsyncIterator[None]:
    """The runner of the tasks this process knows (``TASKS``, from ``create_app``); runs
    still going at shutdown are cancelled and recorded as interrupted."""
    words = app[APPS].reserved_words
    resources = Resources(app[CONFIG], app[STORE], app[REDIS], app[KEYS], words)
    app[TASK_RUNNER] = Runner(resources, holder=f"api:{default_holder()}")
    background: set[asyncio.Task[runs.RunRecord]] = set()
    app[BACKGROUND] = background
    try:
        yield
    finally:
        for run in list(background):
            await cancel_and_wait(run)


def task_named(request: web.Request) -> Task:
    name = request.match_info["name"]
    task = request.app[TASKS].get(name)
    if task is None:
        raise NotFound(f"no task named {name!r}")
    return task


async def _info(
    request: web.Request, task: Task, now: datetime, paused: dict[str, datetime]
) -> TaskInfo:
    last = await runs.newest(request.app[STORE], task.name, 1)
    schedule = task.schedule
    return TaskInfo(
        name=task.name,
        cron=getattr(schedule, "expr", schedule.describe()),
        timezone=getattr(schedule, "timezone", "UTC"),
        next_run=schedule.next_after(now),
        last_run=last[0] if last else None,
        description=task.description,
        policy=task.policy,
        paused=task.name in paused,
        paused_at=paused.get(task.name),
    )


async def list_tasks(request: web.Request) -> web.Response:
    await require_admin(request)
    now = utcnow()
    paused = await paused_tasks(request.app[STORE])
    return json_response(
        [await _info(request, task, now, paused) for task in request.app[TASKS].values()]
    )


async def start_run(request: web.Request) -> web.Response:
    await require_admin(request)
    task = task_named(request)
    runner = request.app[TASK_RUNNER]
    try:
        async with asyncio.timeout(REDIS_TIMEOUT * 4):
            run = await runner.begin(task, "manual", utcnow())
    except (Busy, AlreadyRan):
        raise Conflict(f"a run of {task.name!r} is in progress") from None
    except TimeoutError as exc:  # the lock, then the run record: either can be the slow one
        raise DependencyDown(
            "the run could not start in time: Redis or the database does not answer"
        ) from exc
    except REDIS_ERRORS as exc:
        raise DependencyDown("Redis does not answer; a run needs its lock") from exc
    background = request.app[BACKGROUND]
    job = asyncio.create_task(runner.execute(run), name=f"manual:{task.name}")
    background.add(job)
    job.add_done_callback(background.discard)
    log.info(
        "manual task run started",
        task=task.name,
        run_id=run.record.id,
        run_trace_id=run.record.trace_id,
    )
    return json_response(
        RunStarted(run_id=run.record.id, trace_id=run.record.trace_id),
        202,
        headers={"Location": f"/v1/admin/tasks/{task.name}/runs"},
    )


async def list_runs(request: web.Request) -> web.Response:
    await require_admin(request)
    task = task_named(request)
    limit = query_limit(request, RUNS_DEFAULT, RUNS_MAX)
    status = _choice(request, "status", runs.STATUSES)
    trigger = _choice(request, "trigger", runs.TRIGGERS)
    records = await runs.newest(
        request.app[STORE], task.name, limit, status=status, trigger=trigger
    )
    return json_response(records)


def _choice(request: web.Request, name: str, allowed: tuple[str, ...]) -> str | None:
    value = request.query.get(name)
    if value is not None and value not in allowed:
        raise Unprocessable(
            "invalid query parameters", [FieldError(name, f"must be one of {', '.join(allowed)}")]
        )
    return value


_TASK_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}

ROUTES = (
    Route(
        "GET",
        "/v1/admin/tasks",
        list_tasks,
        {
            "operationId": "listTasks",
            "summary": "Every scheduled task with its cron, zone, policy, pause, next and last run",
            "security": ADMIN,
            "responses": {
                "200": {
                    "description": "the tasks",
                    "content": {JSON: {"schema": {"type": "array", "items": ref(TaskInfo)}}},
                },
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
            },
        },
        structs=(TaskInfo, Policy),
    ),
    Route(
        "POST",
        "/v1/admin/tasks/{name}/runs",
        start_run,
        {
            "operationId": "runTask",
            "summary": "Run a task now, under the same lock as its scheduled runs",
            "description": "The run happens in the background; its record shows the outcome.",
            "security": ADMIN,
            "parameters": [_TASK_NAME],
            "responses": {
                "202": ok(RunStarted, "the run started"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "404": problem("no task has this name"),
                "409": problem("a run of the task is in progress on some replica"),
                "503": problem("Redis does not answer; a run needs its lock"),
            },
        },
        structs=(RunStarted,),
    ),
    Route(
        "GET",
        "/v1/admin/tasks/{name}/runs",
        list_runs,
        {
            "operationId": "taskRuns",
            "summary": "Run records of a task, newest first",
            "security": ADMIN,
            "parameters": [
                _TASK_NAME,
                limit_query(RUNS_DEFAULT, RUNS_MAX),
                {
                    "name": "status",
                    "in": "query",
                    "required": False,
                    "description": "only the records of this status",
                    "schema": {"type": "string", "enum": list(runs.STATUSES)},
                },
                {
                    "name": "trigger",
                    "in": "query",
                    "required": False,
                    "description": "only the records of this trigger",
                    "schema": {"type": "string", "enum": list(runs.TRIGGERS)},
                },
            ],
            "responses": {
                "200": {
                    "description": "the run records",
                    "content": {JSON: {"schema": {"type": "array", "items": ref(runs.RunRecord)}}},
                },
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "404": problem("no task has this name"),
                "422": problem(f"a limit outside 1..{RUNS_MAX}, an unknown status or trigger"),
            },
        },
        structs=(runs.RunRecord,),
    ),
)
