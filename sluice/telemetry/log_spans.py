"""The current span's ids in every log line (docs/guides/tracing.md), so a log backend
joins a line to the span it was written in.

``trace_id`` and ``span_id`` as OpenTelemetry writes them (lowercase hex, 32 and 16
characters), under the names its specification gives them for log formats other than
OTLP. With tracing off, the processor's cost is one check of ``tracing.ENABLED``.
"""

from __future__ import annotations

from structlog.typing import EventDict, WrappedLogger

from sluice.telemetry import tracing


def current_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the current span, None outside any span."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def add_span(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Processor: with tracing on and a span current, its ``trace_id`` and ``span_id``.

    The span's trace id replaces the one the line had (the request's, the event's a
    worker bound): the two are the same but where an event was appended under another
    trace's span, and a ``span_id`` beside another trace's id would name no span."""
    if not tracing.ENABLED:
        return event_dict
    ids = current_ids()
    if ids is not None:
        event_dict["trace_id"], event_dict["span_id"] = ids
    return event_dict
