"""An OTLP/HTTP trace receiver for the tracing tests (docs/guides/tracing.md): it
decodes what sluice's processes export with the protocol's own classes
(opentelemetry-proto, in the dev lock). Imported only by tests that need it, so the
lowest-versions venv, without the ``otel`` extra, never imports it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from sluice.embedded.redis_server import free_port


class Receiver:
    """An OTLP/HTTP trace receiver: every span posted to /v1/traces, with its resource."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Span]] = []

    async def traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                self.spans.extend((resource, span) for span in scope.spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def of_kind(self, kind: int) -> list[Span]:
        return [span for _, span in self.spans if span.kind == kind]


def value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


def attributes(span: Span) -> dict[str, Any]:
    return {a.key: value(a.value) for a in span.attributes}


def otlp_env(port: int, service: str) -> dict[str, str]:
    """The standard variables that make a sluice process export to the receiver on
    ``port`` as ``service``, every 200 ms."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }


@asynccontextmanager
async def receiving() -> AsyncIterator[tuple[Receiver, int]]:
    """A receiver listening on a free loopback port: ``(receiver, port)``."""
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.traces)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield found, port
    finally:
        await runner.cleanup()
