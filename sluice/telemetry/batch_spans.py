"""The CONSUMER span of a batch a group handles in one call: a projection's (``link-stats``
counting visits), a batch group's (docs/guides/tracing.md).

One span per batch, not per event, as the relay's PRODUCER span: a batch's events come
from many traces, so the span is a child of none of them but **linked** to the span that
appended each (OpenTelemetry's messaging conventions for a batch's processing: kind
CONSUMER, ``messaging.batch.message_count``, a link to each message's creation context).
Made only while ``tracing.ENABLED``; its callers check that flag first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sluice.telemetry import attempts, tracing

if TYPE_CHECKING:
    from sluice.streams.messages import Delivery


@contextmanager
def processing(deliveries: Sequence[Delivery], group: str) -> Iterator[None]:
    """A CONSUMER span, current while group ``group`` handles ``deliveries`` in one call,
    linked to the span that appended each of their events (those appended with tracing
    on). The SDK keeps ``OTEL_SPAN_LINK_COUNT_LIMIT`` links (128)."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    links = tracing.links_to(d.message.fields.get("traceparent") for d in deliveries)
    streams = {d.event.aggregate for d in deliveries}
    stream = next(iter(streams)) if len(streams) == 1 else None
    span = tracing.tracer().start_span(
        "process" if stream is None else f"process {stream}",
        context=tracing.parent(None),  # a root: the batch is no one event's consequence
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "redis",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.consumer.group.name": group,
            "messaging.batch.message_count": len(deliveries),
            **({"messaging.destination.name": stream} if stream is not None else {}),
        },
    )
    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:  # the whole batch failed: it is retried
        attempts.failed(span, exc)
        raise
    finally:
        context.detach(token)
        span.end()
