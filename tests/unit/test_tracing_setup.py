"""When tracing turns on (docs/guides/tracing.md): only with an OTLP endpoint in the
standard variables, never when the SDK is disabled, and only over OTLP/HTTP."""

from __future__ import annotations

import sys

import pytest

from sluice.telemetry import tracing


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "shop"}, False),  # a name alone exports nothing
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_tracing_is_wanted_only_with_an_otlp_endpoint(env: dict[str, str], on: bool) -> None:
    assert tracing.wanted(env) is on


def test_nothing_is_set_up_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.configure("sluice") is False
    assert tracing.ENABLED is False


@pytest.mark.parametrize("protocol", ["grpc", "http/json"])
def test_a_protocol_other_than_http_protobuf_leaves_tracing_off(
    monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    assert tracing.configure("sluice") is False
    assert tracing.ENABLED is False


def test_without_the_otel_extra_an_endpoint_leaves_tracing_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    # As if the extra were not installed: importing the exporter fails.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    assert tracing.configure("sluice") is False
    assert tracing.ENABLED is False
