"""Catch-up (docs/guides/tasks.md): the occurrences a task missed while no scheduler ran.

With ``SLUICE_<TASK>_CATCHUP_SECONDS`` above 0, a scheduler that starts looks at
the task's occurrences in the window before its start; each that has no run
record (no scheduler ran it, or noticed it in time) runs once, oldest first,
with the trigger ``catchup``, one after the other. One replica does the catch-up
of a task (a Redis claim, ``CLAIM_MS``, for replicas that start together); each
occurrence still goes through its own claim and the run records' unique index,
so a replica that starts later, or a scheduler that was running all along,
never runs it twice. At most ``CATCHUP_MAX`` occurrences, the newest: a
window of a day over a task that runs every second is a configuration mistake
better cut short than replayed for hours.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import structlog

from sluice.process.resources import Resources
from sluice.scheduler import runs
from sluice.scheduler.task_spec import Task

log = structlog.get_logger(__name__)

CATCHUP_MAX = 1000
CLAIM_MS = 60_000

Occurrence = Callable[[Task, datetime, runs.Trigger], Awaitable[None]]


def occurrences(
    task: Task, start: datetime, end: datetime, limit: int, *, oldest: bool = False
) -> list[datetime]:
    """The task's occurrences in (start, end], oldest first: the newest ``limit`` of them,
    or with ``oldest`` the oldest ``limit`` (and no time spent on the rest)."""
    slots: list[datetime] = []
    after = start
    while (slot := task.schedule.next_after(after)) is not None and slot <= end:
        if oldest and len(slots) == limit:
            break
        slots.append(slot)
        if len(slots) > limit:
            del slots[0]
        after = slot
    return slots


async def catch_up(
    resources: Resources, task: Task, started: datetime, holder: str, occurrence: Occurrence
) -> None:
    """Run the occurrences of ``task`` missed before ``started``; never raises."""
    window = timedelta(seconds=task.policy.catchup_seconds)
    key = f"{resources.keys.task_lock(task.name)}:catchup"
    try:
        if not await resources.redis.set(key, holder, nx=True, px=CLAIM_MS):
            return  # another replica catches up
        slots = occurrences(task, started - window, started, CATCHUP_MAX)
        done = await runs.recorded(resources.store, task.name, slots)
    except Exception as exc:  # Redis or the database: the next start tries again
        log.warning("catch-up not done", task=task.name, error=repr(exc))
        return
    missed = [slot for slot in slots if slot not in done]
    if missed:
        log.info(
            "catching up missed occurrences",
            task=task.name,
            count=len(missed),
            first=missed[0].isoformat(),
            last=missed[-1].isoformat(),
        )
    for slot in missed:
        await occurrence(task, slot, "catchup")
