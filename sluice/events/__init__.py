"""Every domain event, one tagged union, one encoder/decoder pair.

Events are frozen and past-tense. New fields always get defaults and unknown
fields are ignored on decode, so an older consumer keeps reading newer events.
"""

from __future__ import annotations

import os
import random
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import ClassVar

import msgspec

from sluice.events.registry import Registry

# Event ids need to be unique, not unpredictable: 74 random bits a millisecond from a
# generator seeded by the OS (again in a forked child) cost a third of os.urandom's.
_random = random.Random()
os.register_at_fork(after_in_child=_random.seed)


def uuid7() -> str:
    """A UUIDv7 string: 48-bit Unix milliseconds, then random bits (RFC 9562)."""
    ms = time.time_ns() // 1_000_000
    rand = _random.getrandbits(74)
    value = (
        (ms & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76  # version 7
        | (rand >> 62) << 64  # 12 random bits
        | 0x2 << 62  # RFC 4122 variant
        | rand & 0x3FFF_FFFF_FFFF_FFFF  # 62 random bits
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_trace_id() -> str:
    """The id of a trace that starts here: 32 lowercase hex digits (the W3C trace-id
    format), 48-bit Unix milliseconds, then 80 random bits, never all zero.

    Time first, as in a UUIDv7 (or an AWS X-Ray trace id): the history's index of trace
    ids then grows at its right edge, where random ids would scatter every insert over
    the whole index (one more index page written per event, once the history outgrows
    the database's cache). A trace a caller's ``traceparent`` names is kept as it is.
    80 random bits a millisecond keep ids unique without a counter, which would tell
    every client how many requests the process served."""
    return f"{time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF:012x}{_random.getrandbits(80):020x}"


# The trace id an event made here gets when none is given: a handler's delivery binds
# its event's (``sluice.consumers.dispatch``), so what a handler appends joins the trace.
TRACE: ContextVar[str] = ContextVar("sluice_trace", default="")


def utcnow() -> datetime:
    """Now, in UTC (an aware datetime): what events' ``occurred_at`` hold."""
    return datetime.now(UTC)


class Event(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Fields every event carries. ``aggregate`` names the stream it is published on."""

    aggregate: ClassVar[str]
    event_id: str = msgspec.field(default_factory=uuid7)  # a UUIDv7, ordered by time
    occurred_at: datetime = msgspec.field(default_factory=utcnow)  # when, in UTC
    # The request's or task run's trace id; inside a handler, the delivery's (``TRACE``).
    trace_id: str = msgspec.field(default_factory=TRACE.get)  # the request's or run's
    v: int = 1  # the schema version of the event's type


class JobDue(Event, frozen=True, kw_only=True, tag=True):
    """A delayed job fell due (``sluice.app.Job``): fired once by a scheduler, in the
    transaction that removed it from the pending jobs; its group runs it."""

    aggregate: ClassVar[str] = "delayed"
    job: str
    key: str
    scheduled_for: datetime
    payload: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    priority: int = 5  # 0..9, what it was scheduled with (the default level if older)


class TaskRunFinished(Event, frozen=True, kw_only=True, tag=True):
    """A run of a scheduled task ended: what started it and how it ended."""

    aggregate: ClassVar[str] = "tasks"
    run_id: str
    task: str
    trigger: str  # cron | manual | catchup | backfill
    status: str  # succeeded | failed | cancelled
    scheduled_for: datetime | None = None
    error: str | None = None


# The events of sluice itself. An app adds its own through ``sluice.app``
# (``App.event``), registered when the app is loaded (``register``).
CORE_EVENTS: tuple[type[Event], ...] = (
    TaskRunFinished,
    JobDue,
)

# The field naming each aggregate's id, per aggregate type (``sluice.streams.partitions``).
CORE_AGGREGATES: dict[str, str] = {
    "tasks": "task",
    "delayed": "key",
}

CORE = "sluice"  # the owner of the events above


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


def type_name(event: Event) -> str:
    return type(event).__name__


_encoder = msgspec.json.Encoder()
REGISTRY = Registry(Event)
REGISTRY.register(CORE, CORE_EVENTS, CORE_AGGREGATES)
# decode(data): one event of any registered type, brought up to its current version by its
# upcasters; raises msgspec.DecodeError (or ValidationError) on bad data. The registry's
# own method, not a function calling it: one call less per event on the consumer's path.
decode = REGISTRY.decode
# Live views of the registry: an app's events and aggregates join them when it loads.
EVENT_TYPES: dict[str, type[Event]] = REGISTRY.types
AGGREGATES: dict[str, str] = REGISTRY.aggregates
