"""What an app's functions are handed when sluice calls them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import structlog
from redis.asyncio import Redis
from structlog.typing import FilteringBoundLogger

from sluice.config import Config
from sluice.process.resources import Resources
from sluice.store import Store

if TYPE_CHECKING:
    # For mypy alone: a bare ``HandlerContext`` is ``HandlerContext[None]`` (a group
    # without ``deps=``); at run time the default changes nothing.
    from typing_extensions import TypeVar as DefaultedTypeVar

    D = DefaultedTypeVar("D", default=None)
else:
    D = TypeVar("D")


@dataclass(frozen=True)
class HandlerContext(Generic[D]):
    """One delivery of an event to a group's handler: the process's resources, the
    group, the attempt (1 for the first delivery), the group's ``deps`` (what its
    ``deps=`` factory built in this process; None for a group without one), and a
    logger bound to all of it and to the event's trace id. A batch handler's context
    has the batch's highest attempt and no trace id."""

    resources: Resources
    group: str
    attempt: int
    trace_id: str
    deps: D

    @property
    def store(self) -> Store:
        """The process's store (what a task reaches as ``ctx.resources.store``)."""
        return self.resources.store

    @property
    def redis(self) -> Redis:
        """The process's Redis client (a cluster client on a Redis Cluster)."""
        return self.resources.redis

    @property
    def config(self) -> Config:
        """The deployment's configuration."""
        return self.resources.config

    @property
    def log(self) -> FilteringBoundLogger:
        """A logger bound to the group, the attempt and the event's trace id."""
        logger: FilteringBoundLogger = structlog.get_logger("sluice.app")
        return logger.bind(group=self.group, attempt=self.attempt, trace_id=self.trace_id)


@dataclass(frozen=True)
class JobContext(HandlerContext[D]):
    """A delayed job's run: a delivery of its ``JobDue``, with the job's name and key."""

    job: str = ""
    key: str = ""


@dataclass(frozen=True)
class ProjectionContext:
    """A projection's apply: the names of its tables in this run (live, or the fresh
    ones a replay is building) and the deployment's configuration."""

    tables: frozenset[str]
    suffix: str
    config: Config

    def table(self, name: str) -> str:
        """The name to write ``name`` under in this run; ``KeyError`` for a table the
        projection did not declare."""
        if name not in self.tables:
            raise KeyError(f"{name!r} is not one of this projection's tables {sorted(self.tables)}")
        return f"{name}{self.suffix}"
