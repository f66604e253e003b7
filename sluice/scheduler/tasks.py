"""What a task is, and what a run of it may use: its cursor, the resources, its logger."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog
from structlog.typing import FilteringBoundLogger

from sluice.resources import Resources
from sluice.scheduler import runs
from sluice.scheduler.cron import Schedule
from sluice.scheduler.policy import Policy


class LockLost(Exception):
    """The run's lock expired or was taken over; the run must stop."""


@dataclass
class TaskContext:
    """Handed to a task's function for one run.

    ``cursor`` is where a batch task starts: None for a fresh run, else the last
    checkpoint of the previous run, which failed or died midway. A batch task
    calls ``checkpoint`` after each batch it has committed.

    The task reaches the process's parts through ``resources``: the database as
    ``ctx.resources.store`` (a handler's context has it as ``ctx.store``), Redis as
    ``ctx.resources.redis``, the settings as ``ctx.resources.config``.
    """

    resources: Resources
    run: runs.RunRecord
    cursor: str | None
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    checkpoints: int = 0

    @property
    def log(self) -> FilteringBoundLogger:
        """A logger bound to the task's name and the run's id."""
        logger: FilteringBoundLogger = structlog.get_logger("sluice.task")
        return logger.bind(task=self.run.task, run_id=self.run.id)

    async def checkpoint(self, cursor: str) -> None:
        """Store ``cursor`` on the run record; raises ``LockLost`` if the lock is gone."""
        if self.lost.is_set():
            raise LockLost(f"{self.run.task}: lock lost, not saving cursor {cursor!r}")
        await runs.save_cursor(self.resources.store, self.run.id, cursor)
        self.cursor = cursor
        self.checkpoints += 1


TaskFunction = Callable[[TaskContext], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Task:
    name: str
    schedule: Schedule
    run: TaskFunction
    description: str = ""
    # Set from the configuration by the registry (sluice/scheduler/policy.py).
    policy: Policy = field(default_factory=Policy)
