"""A delivered stream entry, as the consumer runtime hands it to a group."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from sluice.events import Event, decode

# An entry's key: its stream and its id in it (``Message.key``).
EntryKey = tuple[str, str]
# An entry as Redis returns it: its id, and its fields (none once the entry was deleted).
RawEntry = tuple[bytes, dict[bytes, bytes] | None]


@dataclass(frozen=True)
class Message:
    """A stream entry as a consumer read it: where from, its id, its fields and how often
    it has been delivered; ``decode`` gives its event."""

    stream: str  # the key it was read from: an aggregate stream or the group's retry stream
    entry_id: str
    fields: Mapping[str, str]
    deliveries: int  # this delivery included, across retries

    @property
    def key(self) -> EntryKey:
        """The entry's stream and id, which name it among a batch's outcomes."""
        return (self.stream, self.entry_id)

    @property
    def event_id(self) -> str:
        """The event's id (what a handler dedupes on); empty when the entry has none."""
        return self.fields.get("event_id", "")

    @property
    def seq(self) -> int:
        """The event's position in the history; 0 when the entry has none."""
        try:
            return int(self.fields.get("seq", "0"))
        except ValueError:
            return 0

    @property
    def type(self) -> str:
        """The event's type name, read without decoding the event."""
        return self.fields.get("type", "")

    @property
    def trace_id(self) -> str:
        """The trace the event belongs to; empty when the entry has none."""
        return self.fields.get("trace_id", "")

    @property
    def origin(self) -> str:
        """The aggregate stream the event was first published on."""
        return self.fields.get("origin", self.stream)

    def decode(self) -> Event:
        """The event; raises ``PoisonMessage`` when the entry cannot be decoded."""
        data = self.fields.get("data")
        if data is None:
            raise PoisonMessage("entry has no data field")
        try:
            return decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise PoisonMessage(f"undecodable event: {exc}") from exc


class NoOutcome(RuntimeError):
    """An entry delivered over the limit without one handler outcome: the consumers
    it went to died (or hung) before finishing it. It goes to the dead letters."""


class PoisonMessage(Exception):
    """The entry itself is broken; retries follow the usual policy, then dead letters."""


@dataclass(frozen=True)
class Delivery:
    """What a batch handler is handed for each entry: the message and its decoded event."""

    message: Message
    event: Event


class Duplicate(Exception):
    """Not a failure: the entry's effect was applied before (a redelivery). Raised by a
    handler (named among a batch handler's failures), the entry is acked and its
    delivery recorded ``duplicate``."""


class Cancelled(Exception):
    """Not a failure: an operator cancelled the work the entry asked for (a job). Raised
    by a handler (named among a batch handler's failures), the entry is acked, never
    retried, and its delivery recorded ``cancelled``."""


class Recorded(Exception):
    """Not a failure: the handler applied the entry (``duplicate``: found it applied
    before) and wrote its attempt itself, in the transaction of the effect (projections,
    ``sluice.records.deliveries.record_in``). Acked, and not recorded again."""

    def __init__(self, duplicate: bool = False) -> None:
        super().__init__("applied before" if duplicate else "handled")
        self.duplicate = duplicate


class NotYet(Exception):
    """Not a failure: the entry cannot be handled yet, because something it needs and
    shares with others is busy (a receiver's calls at once, a rate), not because it is
    wrong. Raised by a handler (named among a batch handler's failures), the entry is
    acked and comes back on the group's retry stream after about ``retry_in_s``,
    without charging a delivery: it never reaches the dead letters by waiting, and its
    wait is not recorded as an attempt. Whatever it did before it raised must be safe
    to do again (as for any retry)."""

    def __init__(self, reason: str = "not yet", retry_in_s: float = 1.0) -> None:
        super().__init__(reason)
        self.retry_in_s = max(retry_in_s, 0.01)


# Outcomes that ack the entry like success; every other exception is a failure.
SETTLED = (Duplicate, Cancelled, Recorded)

# What a group's handler returns for a batch: the failures, keyed by ``Message.key``.
# Anything it does not name as failed is acked; ``Duplicate``, ``Cancelled`` and
# ``Recorded`` are acked too, the first two recorded as such.
Outcomes = Mapping[EntryKey, BaseException]
BatchHandler = Callable[[Sequence[Delivery]], Awaitable[Outcomes]]


def fields_from_redis(raw: Mapping[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
