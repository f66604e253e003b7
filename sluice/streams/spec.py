"""What a consumer runs: the group it serves, its settings, its counters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from sluice.streams.messages import BatchHandler, Message

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
    block_ms: int = 2_000
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
