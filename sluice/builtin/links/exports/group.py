"""The ``exports`` handler group: builds the CSV of each requested export job.

Long jobs keep their stream entry: the consumer runtime resets its idle time
while the handler runs, so no other consumer reclaims it from a live worker.
A job whose entry goes to the dead letters because its workers died on every
delivery is marked failed; redriving the entry resumes it. Dead letters with
a handler outcome need nothing: the runner marks the job failed itself after
its last attempt, and "being run by another worker" means a live runner has it.

A cancelled job (``DELETE /v1/jobs/{id}``) makes ``run_export`` raise
``Cancelled``: the runtime acks the entry without a retry and records the
delivery ``cancelled``.

Users take turns, across every worker (the group's ``flow=``): at most
``SLUICE_EXPORTS_KEY_CONCURRENCY`` (1) exports of one user run at once, the others
wait for their turn without spending deliveries, and users with waiting exports
take turns; so one user's queue never stands in front of another user's first
export, whichever worker read it. Within one read the exports that may run start
in rounds (``turns=``), each owner's first, then each owner's second: it matters
only where a deployment lets a user run more than one at once. With at most
``SLUICE_EXPORTS_PER_USER`` exports per user queued or running, a user's export
waits behind at most that many of any other user's.
"""

from __future__ import annotations

from sluice.app import Flow, HandlerContext
from sluice.builtin.links.app import app
from sluice.builtin.links.events import ExportRequested
from sluice.builtin.links.exports.dead_letters import give_up_job
from sluice.builtin.links.exports.runner import ExportDeps, run_export

NAME = "exports"


def owner(event: ExportRequested) -> str:
    """Whose turn an export is."""
    return event.owner_id


exports_group = app.group(
    NAME,
    deps=ExportDeps.from_resources,
    turns=owner,
    flow=Flow(key="owner_id", concurrency=1),
    on_dead_letter=give_up_job(ExportRequested, "export"),
)


@exports_group.on(ExportRequested)
async def on_export_requested(event: ExportRequested, ctx: HandlerContext[ExportDeps]) -> None:
    await run_export(event.job_id, ctx.deps)
