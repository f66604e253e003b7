"""Spans of runs, and what happened to an entry, for OpenTelemetry tracing
(docs/guides/tracing.md): a task's run and a delayed job's run are spans of their own,
a reclaimed delivery and an entry's retry or dead letter are events on its attempt's
span.

A job's run is a root span in the trace of the request that scheduled it, linked to the
scheduling span rather than its child: the run may come days after the request ended,
and a child would stretch the request's tree over that gap (the messaging conventions'
"process" spans link their message's creation context for the same reason).

Called only while ``tracing.ENABLED``: opentelemetry is imported inside the functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING

from sluice.events import JobDue
from sluice.streams.messages import Delivery, EntryKey, Message
from sluice.telemetry import attempts, tracing

if TYPE_CHECKING:
    from sluice.scheduler.runs import RunRecord

# The entries a consumer reclaimed from a stalled one, while it handles them: the
# consumer that held each and how long it had been idle (ms).
RECLAIMED: ContextVar[Mapping[EntryKey, tuple[str, int]] | None] = ContextVar(
    "sluice_reclaimed", default=None
)


def attempt(call: Awaitable[None], delivery: Delivery, group: str) -> Awaitable[None]:
    """``call``, a handler's attempt at ``delivery``, in its CONSUMER span; a job's
    run makes its own span (``job_run``), so is given back as it is."""
    message = delivery.message
    if type(delivery.event) is JobDue:
        return call
    if RECLAIMED.get():
        call = _noting_reclaim(call, message)
    return tracing.consumed(call, message, group, delivery.event.aggregate)


async def job_run(call: Awaitable[None], job: JobDue, message: Message, group: str) -> None:
    """``call``, an attempt at running ``job``, in its span (see the module docstring):
    none when the scheduling request was not sampled."""
    from opentelemetry.trace import SpanKind

    traceparent = message.fields.get("traceparent")
    if traceparent is not None and traceparent.endswith("-00"):
        with tracing.under(traceparent):  # unsampled: so are the run and what it appends
            await call
        return
    span = tracing.start_root(
        f"run {job.job}",
        traceparent[3:35] if traceparent else message.trace_id,
        traceparent,
        kind=SpanKind.CONSUMER,
        attributes={
            **tracing.processing(message, group, job.aggregate),
            "sluice.job.name": job.job,
            "sluice.job.key": job.key,
            "sluice.job.priority": job.priority,
            "sluice.job.due_at": job.scheduled_for.isoformat(),
            "sluice.job.fired_at": job.occurred_at.isoformat(),
        },
    )
    if RECLAIMED.get():
        call = _noting_reclaim(call, message)
    await attempts.within(span, call, message.key)


async def _noting_reclaim(call: Awaitable[None], message: Message) -> None:
    """``call``, its span (the current one) first told the entry was reclaimed."""
    from opentelemetry import trace

    taken = (RECLAIMED.get() or {}).get(message.key)
    if taken is not None:
        trace.get_current_span().add_event(
            "sluice.reclaimed",
            {
                "sluice.reclaimed.from_consumer": taken[0],
                "sluice.reclaimed.idle_ms": taken[1],
                "sluice.delivery.attempt": message.deliveries,
            },
        )
    await call


@contextlib.contextmanager
def reclaimed(owners: Mapping[EntryKey, tuple[str, int]]) -> Iterator[None]:
    """While the consumer handles the entries it reclaimed from ``owners``."""
    token = RECLAIMED.set(owners) if owners else None
    try:
        yield
    finally:
        if token is not None:
            RECLAIMED.reset(token)


def retrying(message: Message, delay_ms: int) -> None:
    """The failed attempt at ``message`` is retried in ``delay_ms``: said on its span."""
    attempts.settled(message.key, "sluice.retry", {"sluice.retry.delay_ms": delay_ms})


def dead_lettered(message: Message, group: str, reason: str, dead_key: str) -> None:
    """``message`` went to the dead letters: said on its attempt's span, or on a span
    of its own when no attempt was made (an entry over its deliveries, a poison one)."""
    attributes = {
        "sluice.dead_letter.reason": reason,
        "sluice.dead_letter.key": dead_key,
        "sluice.delivery.attempt": message.deliveries,
    }
    if attempts.settled(message.key, "sluice.dead_lettered", attributes):
        return
    from opentelemetry.trace import SpanKind, Status, StatusCode

    span = tracing.tracer().start_span(
        f"dead-letter {group}",
        context=tracing.parent(message.fields.get("traceparent")),
        kind=SpanKind.INTERNAL,
        attributes={
            "messaging.consumer.group.name": group,
            "messaging.message.id": message.event_id,
            "sluice.stream.entry_id": message.entry_id,
            "sluice.stream.key": message.origin,
            "sluice.event.type": message.type,
        },
    )
    span.add_event("sluice.dead_lettered", attributes)
    span.set_status(Status(StatusCode.ERROR, reason))
    span.end()


# --- task runs ------------------------------------------------------------------------


class TaskRun:
    """A task run's span (INTERNAL, a root in the run's own trace), current while the
    run goes: what the task appends is under it, and so are their handlers."""

    __slots__ = ("span", "token")

    def __init__(self, record: RunRecord) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind

        self.span = tracing.start_root(
            f"run {record.task}",
            record.trace_id,
            # A manual run is started by a request: linked to it, as a job to its scheduler.
            tracing.current_traceparent(),
            kind=SpanKind.INTERNAL,
            attributes={
                "sluice.task.name": record.task,
                "sluice.task.run_id": record.id,
                "sluice.task.trigger": record.trigger,
                "sluice.task.scheduled_for": record.scheduled_for.isoformat(),
            },
        )
        self.token = context.attach(trace.set_span_in_context(self.span))

    def end(self, status: str, error: str | None) -> None:
        """The run's outcome (``succeeded``, ``failed``, ``cancelled``), and its end."""
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("sluice.task.outcome", status)
        if status == "failed":
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.span.end()
        context.detach(self.token)


def task_raised(error: BaseException) -> None:
    """The task raised ``error``: recorded on its run's span (the current one)."""
    from opentelemetry import trace

    trace.get_current_span().record_exception(error)
