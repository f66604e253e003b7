"""What a consumer runs: the group it serves, its settings, its counters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sluice.streams.messages import BatchHandler, Message

if TYPE_CHECKING:
    from sluice.config import Config
    from sluice.flow.spec import Flow

# Called after an entry of the group went to its dead letters, with the reason: the
# handler's last exception, PoisonMessage, or NoOutcome (its consumers kept dying).
DeadLetterHook = Callable[[Message, BaseException], Awaitable[None]]


@dataclass(frozen=True)
class GroupSpec:
    """A handler group: its name, the aggregate streams it reads, its batch handler, and
    what it records when one of its entries is given up on (dead-lettered), if anything."""

    name: str
    aggregates: tuple[str, ...]
    handler: BatchHandler
    on_dead_letter: DeadLetterHook | None = None
    # Entries per read when not the process's (``RuntimeSettings.batch``).
    batch: int | None = None
    # The group's own retry backoff, attempts before the dead letters and an attempt's
    # deadline, when not the deployment's (an app's ``App.group`` settings; a
    # ``SLUICE_<GROUP>_TIMEOUT_SECONDS`` setting still wins over the deadline).
    retry_base_ms: int | None = None
    max_deliveries: int | None = None
    handler_timeout_s: float | None = None
    # What the group holds beyond a batch (an HTTP client, say), let go once its consumers
    # have stopped and before the process's store and Redis close.
    close: Callable[[], Awaitable[None]] | None = None
    # Flow control by a key of each event (``sluice.flow``); None: none, at no cost.
    flow: Flow | None = None

    def settings(self, process: RuntimeSettings) -> RuntimeSettings:
        """The process's settings with this group's own in place of the defaults."""
        own: dict[str, Any] = {
            "batch": self.batch,
            "retry_base_ms": self.retry_base_ms,
            "max_deliveries": self.max_deliveries,
            "handler_timeout_s": self.handler_timeout_s,
        }
        chosen = {name: value for name, value in own.items() if value is not None}
        return replace(process, **chosen) if chosen else process


@dataclass(frozen=True)
class RuntimeSettings:
    batch: int = 100
    # How long a read waits for new entries; None: it returns at once (the test harness,
    # which reads until nothing is left: Redis ends a BLOCK of 1 ms only at its next
    # tick, 100 ms later).
    block_ms: int | None = 2_000
    claim_idle_ms: int = 60_000
    retry_base_ms: int = 2_000
    max_deliveries: int = 5
    # An attempt's deadline (SLUICE_HANDLER_TIMEOUT_SECONDS, per group
    # SLUICE_<GROUP>_TIMEOUT_SECONDS): past it the batch is cancelled and fails.
    handler_timeout_s: float = 300.0


@dataclass
class Counters:
    handled: int = 0
    retried: int = 0
    dead: int = 0
    claimed: int = 0


def runtime_settings(config: Config) -> RuntimeSettings:
    """A worker's settings, from the deployment's (``SLUICE_WORKER_*`` and the rest)."""
    return RuntimeSettings(
        batch=config.worker_batch,
        block_ms=config.worker_block_ms,
        claim_idle_ms=config.claim_idle_ms,
        retry_base_ms=config.retry_base_ms,
        max_deliveries=config.max_deliveries,
        handler_timeout_s=config.handler_timeout_seconds,
    )


def with_deployment_timeout(spec: GroupSpec, config: Config) -> GroupSpec:
    """``spec`` with the deadline ``SLUICE_<GROUP>_TIMEOUT_SECONDS`` gives it, if any: the
    deployment's word on one group wins over the group's own default."""
    seconds = config.group_timeouts.get(spec.name)
    return spec if seconds is None else replace(spec, handler_timeout_s=seconds)
