"""The dead-letter hook of the job groups (``exports``, ``imports``): a job whose entry
reached the dead letters because its workers died on every delivery (``NoOutcome``)
is marked failed, so its owner sees why; a redrive runs it again."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from sluice.app import HandlerContext
from sluice.app.advanced import Message, NoOutcome, PoisonMessage
from sluice.builtin.links.events import ExportRequested, ImportRequested
from sluice.builtin.links.exports import jobs

log = structlog.get_logger(__name__)
# What ``on_dead_letter`` of the job groups is: called with the group's context.
DeadLetterHook = Callable[[Message, BaseException, HandlerContext[object]], Awaitable[None]]


def give_up_job(
    request: type[ExportRequested] | type[ImportRequested], what: str
) -> DeadLetterHook:
    """The hook for the group whose jobs ``request`` starts; ``what`` names them in logs."""

    async def on_dead_letter(
        message: Message, error: BaseException, ctx: HandlerContext[object]
    ) -> None:
        if not isinstance(error, NoOutcome):
            return
        try:
            event = message.decode()
        except PoisonMessage:
            return
        if isinstance(event, request):
            reason = f"given up after {message.deliveries} deliveries: {error}"
            if await jobs.give_up(ctx.store, event.job_id, reason):
                log.error(f"{what} failed: its entry is in the dead letters", job_id=event.job_id)

    return on_dead_letter
