"""Log lines carry the ids of the span they were written in (docs/guides/tracing.md):
a view's line and the request's own line the request's SERVER span, a handler's line
its CONSUMER span, as the in-memory exporter received those spans."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

import structlog
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from structlog.typing import EventDict

from sluice.app.testing import HarnessFactory
from sluice.telemetry.logs import processors, render_json
from tests.app_helpers import AppDir

CRATES = """
from typing import ClassVar

import structlog
from aiohttp import web
from sluice.app import App, Event, HandlerContext, Tx, json_response, store

app = App("crates")
app.aggregate("crates", key="crate_id")
log = structlog.get_logger("crates")


@app.event
class CrateSealed(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "crates"
    crate_id: str


@app.route("POST", "/v1/crates/{crate_id}", doc={"operationId": "sealCrate",
           "summary": "seal", "responses": {"201": {"description": "sealed"}}})
async def seal(request: web.Request) -> web.Response:
    crate_id = request.match_info["crate_id"]
    async with store(request).transaction() as tx:
        await tx.append(CrateSealed(crate_id=crate_id))
    log.info("crate sealed", crate_id=crate_id)
    return json_response({"id": crate_id}, 201)


shipping = app.group("shipping")


@shipping.once(CrateSealed)
async def ship(event: CrateSealed, tx: Tx, ctx: HandlerContext) -> None:
    ctx.log.info("crate shipped", crate_id=event.crate_id)
"""

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _line(lines: list[EventDict], event: str) -> EventDict:
    found = [line for line in lines if line["event"] == event]
    assert len(found) == 1, lines
    return found[0]


async def test_a_requests_lines_and_a_handlers_lines_carry_their_spans_ids(
    app_dir: AppDir,
    sluice_harness: HarnessFactory,
    sluice_store_kind: str,
    spans: InMemorySpanExporter,
) -> None:
    app_dir.module("crates_app", CRATES)
    h = await sluice_harness("crates_app", store=sluice_store_kind)
    # The chain every sluice line goes through, but its renderer: the lines as dicts.
    with structlog.testing.capture_logs(processors=processors(render_json)[:-1]) as lines:
        async with h.client.post(
            "/v1/crates/c1", headers={"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"}
        ) as r:
            assert r.status == 201, await r.text()
        await h.drain()
    finished = spans.get_finished_spans()
    (server,) = [s for s in finished if s.kind == SpanKind.SERVER]
    (consumer,) = [s for s in finished if s.kind == SpanKind.CONSUMER]
    server_ids = (CALLER_TRACE, f"{server.context.span_id:016x}")
    consumer_ids = (CALLER_TRACE, f"{consumer.context.span_id:016x}")
    assert f"{consumer.context.trace_id:032x}" == CALLER_TRACE

    sealed, summary = _line(lines, "crate sealed"), _line(lines, "request")
    shipped = _line(lines, "crate shipped")
    assert (sealed["trace_id"], sealed["span_id"]) == server_ids
    # The request's own line is written before its span ends: the span's ids too.
    assert (summary["trace_id"], summary["span_id"], summary["status"]) == (*server_ids, 201)
    assert (shipped["trace_id"], shipped["span_id"]) == consumer_ids
    assert shipped["group"] == "shipping"
