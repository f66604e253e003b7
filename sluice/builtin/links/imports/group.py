"""The ``imports`` handler group: runs each uploaded CSV of links (``ImportRequested``).

It reads the jobs stream (aggregate ``exports``) beside the ``exports`` group; each
group acks the other's events without a call. A job cancelled by its owner or the
admin makes ``run_import`` raise ``Cancelled``: the entry is acked without a retry.
A job whose entry goes to the dead letters because its workers died on every
delivery is marked failed (its upload is kept: a redrive resumes it).

Users take turns across every worker (the group's ``flow=``): at most
``SLUICE_IMPORTS_KEY_CONCURRENCY`` (1) imports of one user run at once; the others
wait for their turn without spending deliveries, so one user's uploads never hold
up another user's.
"""

from __future__ import annotations

from sluice.app import Flow, HandlerContext
from sluice.builtin.links.app import app
from sluice.builtin.links.events import ImportRequested
from sluice.builtin.links.exports.dead_letters import give_up_job
from sluice.builtin.links.imports.runner import ImportDeps, run_import

NAME = "imports"

imports_group = app.group(
    NAME,
    deps=ImportDeps.from_resources,
    flow=Flow(key="owner_id", concurrency=1),
    on_dead_letter=give_up_job(ImportRequested, "import"),
)


@imports_group.on(ImportRequested)
async def on_import_requested(event: ImportRequested, ctx: HandlerContext[ImportDeps]) -> None:
    await run_import(event.job_id, ctx.deps)
