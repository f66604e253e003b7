"""The current span's ids in log lines (docs/guides/tracing.md): written as
OpenTelemetry writes them with tracing on, absent with it off, the same on the request
line's fast path and on a library's record."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

import structlog
from opentelemetry.sdk.trace import TracerProvider

from sluice.telemetry import tracing
from sluice.telemetry.logs import (
    REQUEST,
    LineWriter,
    Timestamp,
    WriterLogger,
    json_request_line,
    lean_bound_logger,
    processors,
    render_json,
    stdlib_formatter,
)

WORKER_TRACE = "0" * 31 + "7"  # what a worker binds: the event's trace id


@pytest.fixture
def traced() -> Iterator[None]:
    tracing.install(tracing.new_provider("log-spans-test"))  # no exporter: spans kept nowhere
    try:
        yield
    finally:
        tracing.shutdown()


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _logger(stream: io.StringIO) -> Any:
    return structlog.wrap_logger(
        WriterLogger(LineWriter(stream)),
        processors=processors(render_json),
        wrapper_class=lean_bound_logger(logging.INFO),
    )


def _ids(span: Any) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_a_line_written_in_a_span_carries_the_spans_ids(traced: None) -> None:
    stream = io.StringIO()
    log = _logger(stream)
    with structlog.contextvars.bound_contextvars(trace_id=WORKER_TRACE):
        with tracing.tracer().start_as_current_span("outer") as outer:
            log.info("in the span")
            with tracing.tracer().start_as_current_span("inner") as inner:
                log.info("in the inner span")
        log.info("after the spans")
    in_span, in_inner, after = _lines(stream)
    assert (in_span["trace_id"], in_span["span_id"]) == _ids(outer)
    assert (in_inner["trace_id"], in_inner["span_id"]) == _ids(inner)  # the current one
    assert len(in_inner["trace_id"]) == 32 and len(in_inner["span_id"]) == 16
    assert in_inner["trace_id"] == in_inner["trace_id"].lower()
    assert after["trace_id"] == WORKER_TRACE and "span_id" not in after


def test_with_tracing_off_a_line_has_no_span_id_even_in_a_span() -> None:
    assert not tracing.ENABLED
    stream = io.StringIO()
    log = _logger(stream)
    # An app's own span, from a provider of its own: sluice's tracing is still off.
    with (
        structlog.contextvars.bound_contextvars(trace_id=WORKER_TRACE),
        TracerProvider().get_tracer("app").start_as_current_span("the app's"),
    ):
        log.info("in the app's span")
    (line,) = _lines(stream)
    assert line["trace_id"] == WORKER_TRACE and "span_id" not in line


def test_the_fast_request_line_carries_the_span_ids_as_the_chain_does(traced: None) -> None:
    chain, fast = io.StringIO(), io.StringIO()
    log = _logger(chain)
    request_line = json_request_line(LineWriter(fast), Timestamp())
    with tracing.tracer().start_as_current_span("GET /r") as span:
        trace_id = _ids(span)[0]
        for context in ((trace_id, "GET", "/r", "client-req-0001"), None):
            token = REQUEST.set(context)
            try:
                log.info("request", status=200, duration_ms=0.5)
                request_line(200, 0.5)
            finally:
                REQUEST.reset(token)
    slow_lines, fast_lines = _lines(chain), _lines(fast)
    assert len(fast_lines) == 2
    for slow, quick in zip(slow_lines, fast_lines, strict=True):
        del slow["timestamp"], quick["timestamp"]
        assert list(quick.items()) == list(slow.items())  # same keys and values, same order
        assert (quick["trace_id"], quick["span_id"]) == _ids(span)


def test_a_library_record_in_a_span_carries_its_ids(traced: None) -> None:
    formatter = stdlib_formatter(render_json, Timestamp())
    record = logging.LogRecord("aiohttp.server", logging.WARNING, __file__, 1, "slow", (), None)
    with tracing.tracer().start_as_current_span("POST /v1/users") as span:
        line = json.loads(formatter.format(record))
    assert (line["trace_id"], line["span_id"]) == _ids(span)
