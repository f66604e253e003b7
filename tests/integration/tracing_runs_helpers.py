"""The ``errands`` app of the tests of task runs, job runs, retries, reclaims and dead
letters as spans (docs/guides/tracing.md). Its source is written to a module of its own
by ``AppDir``, so worker processes load it too."""

from __future__ import annotations

ERRANDS = """
from datetime import timedelta
from typing import ClassVar

import msgspec
from aiohttp import web
from sluice.app import (
    App, Event, HandlerContext, JobContext, TaskContext, Tx, json_response, read_json, store,
)

app = App("errands")
app.aggregate("errands", key="errand_id")
SWEEP = {"fails": False}  # whether the sweep task raises


@app.event
class ErrandNoted(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "errands"
    errand_id: str
    fails: int = 0  # attempts its noting fails before it succeeds


@app.event
class ErrandReminded(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "errands"
    errand_id: str


class Plan(msgspec.Struct, frozen=True):
    errand_id: str
    fails: int = 0
    remind_in_s: float = 3600.0


class Remind(msgspec.Struct, frozen=True):
    errand_id: str


@app.route("POST", "/v1/errands", doc={"operationId": "planErrand", "summary": "plan",
           "responses": {"201": {"description": "planned"}}})
async def plan(request: web.Request) -> web.Response:
    body = await read_json(request, Plan)
    async with store(request).transaction() as tx:
        await tx.append(ErrandNoted(errand_id=body.errand_id, fails=body.fails))
        await remind.schedule(tx, Remind(body.errand_id), key=body.errand_id,
                              delay=timedelta(seconds=body.remind_in_s), priority=7)
    return json_response({"id": body.errand_id}, 201)


@app.job("remind", payload=Remind)
async def remind(job: Remind, tx: Tx, ctx: JobContext) -> None:
    await tx.append(ErrandReminded(errand_id=job.errand_id))


noting = app.group("noting", max_deliveries=3, retry_base_ms=100)


@noting.once(ErrandNoted)
async def note(event: ErrandNoted, tx: Tx, ctx: HandlerContext) -> None:
    if ctx.attempt <= event.fails:
        raise LookupError(f"the notebook is lost (attempt {ctx.attempt})")


telling = app.group("telling")


@telling.on(ErrandReminded)
async def tell(event: ErrandReminded, ctx: HandlerContext) -> None:
    pass


@app.task("sweep", cron="0 0 3 * * *")
async def sweep(ctx: TaskContext) -> None:
    if SWEEP["fails"]:
        raise RuntimeError("the broom broke")
    async with ctx.resources.store.transaction() as tx:
        await tx.append(ErrandNoted(errand_id="swept"))
"""
