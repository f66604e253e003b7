"""The ``imports`` handler group: runs each uploaded CSV of links (``ImportRequested``).

It reads the jobs stream (aggregate ``exports``) beside the ``exports`` group; each
group acks the other's events without a call. A job cancelled by its owner or the
admin makes ``run_import`` raise ``Cancelled``: the entry is acked without a retry.
A job whose entry goes to the dead letters because its workers died on every
delivery is marked failed (its upload is kept: a redrive resumes it).
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.app import Event, Resources
from sluice.app.advanced import EventHandler, GroupSpec, event_group
from sluice.builtin.links.events import ImportRequested
from sluice.builtin.links.exports.dead_letters import give_up_job
from sluice.builtin.links.imports.runner import ImportDeps, run_import

NAME = "imports"


async def on_import_requested(event: ImportRequested, deps: ImportDeps) -> None:
    await run_import(event.job_id, deps)


HANDLERS: Mapping[type[Event], EventHandler] = {ImportRequested: on_import_requested}


def group(resources: Resources, deps: ImportDeps | None = None) -> GroupSpec:
    aggregates = tuple(sorted({event_type.aggregate for event_type in HANDLERS}))
    deps = deps or ImportDeps.from_resources(resources)
    on_dead_letter = give_up_job(deps.store, ImportRequested, "import")
    return event_group(
        NAME, aggregates, HANDLERS, deps, resources.config.worker_concurrency, on_dead_letter
    )
