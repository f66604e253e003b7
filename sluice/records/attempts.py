"""What a delivery record is made of: an attempt's outcome, the attempt as recorded
(``Attempt``) and as the admin routes show it (``DeliveryView``), and the batch a
consumer is handling (``Batch``) with its id. Shared by the row-per-attempt log
(``deliveries``) and the row-per-batch one of projections (``delivery_batches``),
which import it and not each other's insides."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from sluice.streams.messages import Cancelled, Duplicate, Recorded

Outcome = Literal["handled", "duplicate", "failed", "dead_lettered", "cancelled"]


def outcome_of(error: BaseException | None, given_up: bool = False) -> Outcome:
    """The outcome an attempt is recorded (and logged) with, from the error the handler
    named for its entry (none: handled); ``given_up``: a failure sent to the dead letters."""
    if error is None:
        return "handled"
    if isinstance(error, Recorded):
        return "duplicate" if error.duplicate else "handled"
    if isinstance(error, Duplicate):
        return "duplicate"
    if isinstance(error, Cancelled):
        return "cancelled"
    return "dead_lettered" if given_up else "failed"


# Batch ids are chosen by the process: milliseconds since 2024 (time order, for the
# purge), then 22 random bits; 63 bits in all until about 2093.
_EPOCH_MS = 1_704_067_200_000
_RANDOM_BITS = 22


def new_batch_id() -> int:
    """A batch's id: in time order, and unique short of two batches drawing the same 22
    random bits in the same millisecond. Then the second batch's transaction fails on
    the key and the consumer runs it again (nothing of it was committed)."""
    return (time.time_ns() // 1_000_000 - _EPOCH_MS) << _RANDOM_BITS | secrets.randbits(
        _RANDOM_BITS
    )


class Attempt(msgspec.Struct, frozen=True, gc=False):
    """One delivery of an event to a group, as recorded. ``started_at``: when its batch's
    handler was called (UTC, ISO 8601); ``duration_ms``: that call's duration (the
    attempts of one batch share it; 0 for an entry given up on before any call)."""

    event_id: str
    group: str
    consumer: str
    stream: str
    entry_id: str
    attempt: int
    outcome: Outcome
    error: str | None
    started_at: str
    duration_ms: float


class DeliveryView(msgspec.Struct, frozen=True):
    """An attempt as the admin routes show it."""

    group: str
    consumer: str
    stream: str
    entry_id: str
    attempt: int
    outcome: Outcome
    error: str | None
    started_at: str
    duration_ms: float


@dataclass(frozen=True)
class Batch:
    """The batch a consumer is handling, for a handler that records its own attempts;
    ``started``: when the consumer called the handler (epoch seconds); ``id``: the id of
    its row of handled attempts (``sluice.records.delivery_batches``)."""

    group: str
    consumer: str
    started: float
    id: int = field(default_factory=new_batch_id)
