"""An OTLP/HTTP trace receiver for the tracing tests (docs/guides/tracing.md): it
decodes what sluice's processes export with the protocol's own classes
(opentelemetry-proto, in the dev lock). Imported only by tests that need it, so the
lowest-versions venv, without the ``otel`` extra, never imports it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from sluice.app.testing import Child, wait_answering, wait_for
from sluice.config import Config
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

    async def until(self, condition: Callable[[], Awaitable[bool]], timeout: float) -> None:
        """Wait for ``condition``; past ``timeout``, fail listing every span received."""
        try:
            await wait_for(condition, timeout=timeout)
        except AssertionError as exc:
            seen = "\n".join(
                f"{r['service.name']} {s.kind} {s.name} {s.trace_id.hex()} {attributes(s)}"
                for r, s in self.spans
            )
            raise AssertionError(f"spans received:\n{seen}") from exc


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


async def deploy(
    sluice_spawn: Callable[..., Child],
    config: Config,
    otlp_port: int,
    port: int,
    *groups: str,
    scheduler: bool = False,
) -> str:
    """``config``'s deployment as separate processes exporting to the receiver on
    ``otlp_port``, each as its own service: an API on ``port``, a relay, a scheduler if
    asked, and a worker running ``groups``. Returns the API's URL once it answers."""
    sluice_spawn(config, "api", SLUICE_PORT=str(port), **otlp_env(otlp_port, "api"))
    sluice_spawn(config, "relay", **otlp_env(otlp_port, "relay"))
    if scheduler:
        sluice_spawn(config, "scheduler", **otlp_env(otlp_port, "scheduler"))
    sluice_spawn(config, "worker", *groups, **otlp_env(otlp_port, "worker"))
    url = f"http://127.0.0.1:{port}"
    await wait_answering([url])
    return url


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
