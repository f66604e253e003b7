"""The ``exports`` handler group: builds the CSV of each requested export job.

Long jobs keep their stream entry: the consumer runtime resets its idle time
while the handler runs, so no other consumer reclaims it from a live worker.
A job whose entry goes to the dead letters because its workers died on every
delivery is marked failed; redriving the entry resumes it. Dead letters with
a handler outcome need nothing: the runner marks the job failed itself after
its last attempt, and "being run by another worker" means a live runner has it.

A cancelled job (``DELETE /v1/jobs/{id}``) makes ``run_export`` raise
``Cancelled``; ``event_group`` puts it in the outcomes, so the runtime acks the
entry without a retry and records the delivery ``cancelled``.

Users take turns: the exports of a batch start (as the group's concurrency
lets them) in rounds, each owner's first, then each owner's second, and so on,
so one user's queue never stands in front of another user's first export. With
at most ``SLUICE_EXPORTS_PER_USER`` exports per user queued or running, a
user's export waits behind at most that many of any other user's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from itertools import zip_longest

from sluice.app import Event, Resources
from sluice.app.advanced import Delivery, EventHandler, GroupSpec, event_group
from sluice.builtin.links.events import ExportRequested
from sluice.builtin.links.exports.dead_letters import give_up_job
from sluice.builtin.links.exports.runner import ExportDeps, run_export

NAME = "exports"


async def on_export_requested(event: ExportRequested, deps: ExportDeps) -> None:
    await run_export(event.job_id, deps)


HANDLERS: Mapping[type[Event], EventHandler] = {ExportRequested: on_export_requested}


def in_turns(deliveries: Sequence[Delivery]) -> list[Delivery]:
    """The batch in rounds by owner (each keeps its own order): everyone's first, then
    everyone's second, ...; owners in the order their first export came."""
    queues: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        event = delivery.event
        owner = event.owner_id if isinstance(event, ExportRequested) else ""
        queues.setdefault(owner, []).append(delivery)
    rounds = zip_longest(*queues.values())
    return [delivery for turn in rounds for delivery in turn if delivery is not None]


def group(resources: Resources, deps: ExportDeps | None = None) -> GroupSpec:
    aggregates = tuple(sorted({event_type.aggregate for event_type in HANDLERS}))
    deps = deps or ExportDeps.from_resources(resources)
    on_dead_letter = give_up_job(deps.store, ExportRequested, "export")
    spec = event_group(
        NAME, aggregates, HANDLERS, deps, resources.config.worker_concurrency, on_dead_letter
    )
    run_batch = spec.handler

    async def taking_turns(
        deliveries: Sequence[Delivery],
    ) -> Mapping[tuple[str, str], BaseException]:
        # event_group starts them in this order, each waiting for a free place.
        return await run_batch(in_turns(deliveries))

    return dataclasses.replace(spec, handler=taking_turns)
