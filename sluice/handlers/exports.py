"""The ``exports`` handler group: builds the CSV of each requested export job.

Long jobs keep their stream entry: the consumer runtime resets its idle time
while the handler runs, so no other consumer reclaims it from a live worker.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.events import Event, ExportRequested
from sluice.exports.runner import ExportDeps, run_export
from sluice.resources import Resources
from sluice.streams.dispatch import EventHandler, event_group
from sluice.streams.spec import GroupSpec

NAME = "exports"


async def on_export_requested(event: ExportRequested, deps: ExportDeps) -> None:
    await run_export(event.job_id, deps)


HANDLERS: Mapping[type[Event], EventHandler] = {ExportRequested: on_export_requested}


def group(resources: Resources, deps: ExportDeps | None = None) -> GroupSpec:
    aggregates = tuple(sorted({event_type.aggregate for event_type in HANDLERS}))
    return event_group(
        NAME, aggregates, HANDLERS, deps or ExportDeps.from_resources(resources),
        resources.config.worker_concurrency,
    )  # fmt: skip
