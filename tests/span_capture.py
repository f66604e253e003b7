"""The ``spans`` fixture (imported by the integration and browser conftests): sluice
traced in this process, every span kept by the SDK's in-memory exporter as soon as it
ends (docs/guides/tracing.md). Skips without the ``otel`` extra; OpenTelemetry is
imported only then, so the conftests load without it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from sluice.telemetry import tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = tracing.new_provider("sluice-test")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()
    assert not tracing.ENABLED
