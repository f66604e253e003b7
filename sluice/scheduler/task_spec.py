"""What a task is, how one is declared (by an app with ``@app.task``, by sluice for its
own in ``sluice.scheduler.builtin``: the same ``declare_task``), and what a run of it
may use: its cursor, the resources, its logger."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from structlog.typing import FilteringBoundLogger

from sluice.config import Config
from sluice.errors import ConfigError
from sluice.process.resources import Resources
from sluice.scheduler import runs
from sluice.scheduler.cron import CronError, Schedule, parse_cron
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
F = TypeVar("F", bound=TaskFunction)


@dataclass(frozen=True)
class Task:
    name: str
    schedule: Schedule
    run: TaskFunction
    description: str = ""
    # Set from the configuration by the registry (sluice/scheduler/policy.py).
    policy: Policy = field(default_factory=Policy)


@dataclass(frozen=True)
class TaskDeclaration:
    """A task as declared: its schedule (six-field ``cron`` in ``timezone``, each given or
    read from the config) and its default policy; ``task`` makes it one to run."""

    name: str
    run: TaskFunction
    cron: str | Callable[[Config], str]
    timezone: str | Callable[[Config], str]
    description: str
    overlap: str = "skip"
    catchup_seconds: float = 0.0
    jitter_seconds: float = 0.0
    timeout_seconds: float | None = None

    def schedule_of(self, config: Config) -> tuple[str, str]:
        """The cron expression and the zone (the config's ``timezone`` if none)."""
        cron = self.cron(config) if callable(self.cron) else self.cron
        zone = self.timezone(config) if callable(self.timezone) else self.timezone
        return cron, zone or config.timezone

    def task(self, config: Config, where: str) -> Task:
        """The task to run, with its declared policy (the deployment's
        ``SLUICE_<TASK>_*`` settings are laid over it by the registry); a bad schedule is
        a configuration error, said ``where``."""
        try:
            schedule = parse_cron(*self.schedule_of(config))
        except CronError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        policy = Policy(
            overlap=self.overlap,
            catchup_seconds=self.catchup_seconds,
            jitter_seconds=self.jitter_seconds,
            timeout_seconds=self.timeout_seconds,
        )
        return Task(self.name, schedule, self.run, self.description, policy)


def declare_task(
    tasks: dict[str, TaskDeclaration],
    name: str,
    *,
    cron: str | Callable[[Config], str],
    timezone: str | Callable[[Config], str] = "UTC",
    description: str = "",
    overlap: str = "skip",
    catchup_seconds: float = 0.0,
    jitter_seconds: float = 0.0,
    timeout_seconds: float | None = None,
    check: Callable[[TaskFunction], None] | None = None,
) -> Callable[[F], F]:
    """The decorator that declares ``async def task(ctx)`` as ``name`` into ``tasks``
    (``@app.task`` is this, with the app's checks as ``check``); the description is the
    function's docstring unless given."""

    def declare(function: F) -> F:
        if check is not None:
            check(function)
        tasks[name] = TaskDeclaration(
            name,
            function,
            cron,
            timezone,
            description or (function.__doc__ or "").strip(),
            overlap,
            catchup_seconds,
            jitter_seconds,
            timeout_seconds,
        )
        return function

    return declare
