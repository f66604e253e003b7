"""A handler's attempt under its span, for OpenTelemetry tracing (docs/guides/tracing.md):
the span current while the attempt runs, its failure recorded on it, and a failed
attempt's span held open until the consumer has settled the entry (retried or
dead-lettered), which ``sluice.telemetry.run_spans`` then tells on it.

Used only while tracing is on: opentelemetry is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Iterator
from contextvars import ContextVar
from typing import Any

# A batch's failed attempts, by entry: their span and when the attempt ended. Set by the
# consumer while it handles and settles a batch (``holding``).
HELD: ContextVar[dict[Any, tuple[Any, int]] | None] = ContextVar("sluice_held", default=None)


async def within(span: Any, call: Awaitable[None], key: object) -> None:
    """``call`` (an attempt at the entry ``key``) with ``span`` current, then the span
    ended; on failure, its exception recorded, and the span held for the entry's
    settling while the consumer holds spans (``HELD``)."""
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span))
    held = None
    try:
        await call
    except BaseException as exc:
        failed(span, exc)
        held = HELD.get()
        raise
    finally:
        context.detach(token)
        if held is None:
            span.end()
        else:  # an attempt run again through an outage ends the one before
            if (before := held.get(key)) is not None:
                before[0].end(end_time=before[1])
            held[key] = (span, time.time_ns())


def failed(span: Any, exc: BaseException) -> None:
    """``span`` is an error span: ``exc`` recorded on it, its type as ``error.type``."""
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__qualname__}: {exc}"))
    span.set_attribute("error.type", type(exc).__qualname__)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """While a consumer handles and settles a batch: its failed attempts' spans wait
    for their entry's outcome, ended at the latest here."""
    held: dict[Any, tuple[Any, int]] = {}
    token = HELD.set(held)
    try:
        yield
    finally:
        HELD.reset(token)
        for span, ended in held.values():
            span.end(end_time=ended)


def settled(key: object, event: str, attributes: dict[str, Any]) -> bool:
    """``event`` on the held span of the failed attempt at the entry ``key``, which ends
    then (at the attempt's end, the event stamped there); False when none is held."""
    held = HELD.get()
    taken = held.pop(key, None) if held is not None else None
    if taken is None:
        return False
    span, ended = taken
    span.add_event(event, attributes, timestamp=ended)
    span.end(end_time=ended)
    return True
