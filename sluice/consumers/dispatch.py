"""Handler groups made of plain per-event functions, run with a concurrency limit.

A group module exports a mapping from event type to ``async def on_x(event, deps)``;
``event_group`` turns it into the batch handler the runtime calls. Events of
other types on the group's streams are acked without a call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog

from sluice.events import TRACE, Event
from sluice.streams.messages import Delivery, EntryKey, Outcomes
from sluice.streams.spec import DeadLetterHook, GroupSpec
from sluice.telemetry import run_spans, tracing

# A per-event handler of ``event_group``: ``async def on_x(event, deps)``.
EventHandler = Callable[[Any, Any], Awaitable[None]]
# How a handler is called for a delivery: by default ``handler(event, deps)``.
Invoke = Callable[[Any, Delivery, Any], Awaitable[None]]


async def _call(handler: EventHandler, delivery: Delivery, deps: Any) -> None:
    await handler(delivery.event, deps)


def event_group(
    name: str,
    aggregates: tuple[str, ...],
    handlers: Mapping[type[Event], EventHandler],
    deps: object,
    concurrency: int,
    on_dead_letter: DeadLetterHook | None = None,
    invoke: Invoke = _call,
) -> GroupSpec:
    """A group named ``name`` on ``aggregates``' streams whose batch handler calls the
    handler of each event's type (at most ``concurrency`` at once) with ``deps``; a
    handler's exception is its entry's failure, retried or dead-lettered by the runtime."""
    limit = asyncio.Semaphore(concurrency)

    async def one(delivery: Delivery, failures: dict[EntryKey, BaseException]) -> None:
        handler = handlers.get(type(delivery.event))
        if handler is None:
            return
        message = delivery.message
        async with limit:
            with structlog.contextvars.bound_contextvars(
                trace_id=message.trace_id,
                group=name,
                event_type=message.type,
                event_id=message.event_id,
                stream=message.stream,
            ):
                TRACE.set(message.trace_id)  # this task's own: events it makes join the trace
                try:
                    if tracing.ENABLED:  # a CONSUMER span per attempt, in the event's trace
                        await run_spans.attempt(invoke(handler, delivery, deps), delivery, name)
                    else:
                        await invoke(handler, delivery, deps)
                except Exception as exc:  # the runtime decides: retry or dead letter
                    failures[message.key] = exc

    async def handle(deliveries: Sequence[Delivery]) -> Outcomes:
        failures: dict[EntryKey, BaseException] = {}
        await asyncio.gather(*(one(d, failures) for d in deliveries))
        return failures

    return GroupSpec(name, aggregates, handle, on_dead_letter)
