"""An OTLP/HTTP trace endpoint that takes what an exporter sends, counts the spans and
discards them: the collector of ``tracing_cost.py``'s runs.

It runs in a thread of the bench's own process, so the measured process (under
callgrind) does all of a traced process's work, the SDK's batching, the protobuf
encoding and the HTTP posts included, and none of a collector's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from sluice.embedded.redis_server import free_port

_OK = ExportTraceServiceResponse().SerializeToString()


class Sink:
    """``with Sink() as sink``: listening on ``sink.port``; ``sink.spans`` received so far."""

    def __init__(self) -> None:
        self.port = free_port()
        self.spans = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="otlp-sink", daemon=True)

    def env(self, service: str) -> dict[str, str]:
        """The standard variables that make a sluice process export here, nothing else:
        the SDK's defaults for everything (its batch processor, a post every 5 s or
        every 512 spans)."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "OTEL_SERVICE_NAME": service,
        }

    def wait(self, spans: int, timeout: float = 300) -> None:
        """Until ``spans`` in all have arrived (a batch processor posts on its own schedule)."""
        deadline = time.monotonic() + timeout
        while self.spans < spans:
            if time.monotonic() > deadline:
                raise SystemExit(f"the OTLP sink got {self.spans:,} spans, waited for {spans:,}")
            time.sleep(0.05)

    async def _traces(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await request.read())
        self.spans += sum(
            len(scope.spans) for rs in export.resource_spans for scope in rs.scope_spans
        )
        return web.Response(body=_OK, content_type="application/x-protobuf")

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def __enter__(self) -> Sink:
        self._thread.start()
        if not self._ready.wait(30):
            raise SystemExit("the OTLP sink did not start")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
