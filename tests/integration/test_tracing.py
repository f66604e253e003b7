"""OpenTelemetry tracing (docs/guides/tracing.md) through the in-process harness, spans
kept by the SDK's in-memory exporter: a request's SERVER span continues the caller's
traceparent, the relay's PRODUCER span links the events it published, and each handler
attempt is a CONSUMER span in the request's trace (on one Redis and on a Redis Cluster),
a failed one with its error."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from sluice.app.testing import Harness, HarnessFactory, open_harness
from sluice.config import Config
from sluice.telemetry import tracing
from tests.app_helpers import AppDir

PARCELS = """
from datetime import timedelta
from typing import ClassVar

import msgspec
from aiohttp import web
from sluice.app import (
    App, Event, HandlerContext, JobContext, Tx, json_response, read_json, store,
)

app = App("parcels")
app.aggregate("parcels", key="parcel_id")
FAILS: dict[str, int] = {}  # attempts a parcel's labelling fails before it succeeds


@app.event
class ParcelShipped(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "parcels"
    parcel_id: str


@app.event
class ParcelLabelled(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "parcels"
    parcel_id: str


class Send(msgspec.Struct, frozen=True):
    parcel_id: str


@app.route("POST", "/v1/parcels/{kind}", doc={"operationId": "sendParcel", "summary": "send",
           "responses": {"201": {"description": "sent"}}})
async def send(request: web.Request) -> web.Response:
    body = await read_json(request, Send)
    async with store(request).transaction() as tx:
        await tx.append(ParcelShipped(parcel_id=body.parcel_id))
        await chase.schedule(tx, Chase(body.parcel_id), key=body.parcel_id,
                             delay=timedelta(hours=1))
    return json_response({"id": body.parcel_id}, 201)


@app.route("GET", "/v1/parcels/{parcel_id}/label", doc={"operationId": "parcelLabel",
           "summary": "label", "responses": {"200": {"description": "the label"}}})
async def label_of(request: web.Request) -> web.Response:
    raise RuntimeError("the label store is gone")


class Chase(msgspec.Struct, frozen=True):
    parcel_id: str


@app.job("chase", payload=Chase)
async def chase(job: Chase, tx: Tx, ctx: JobContext) -> None:
    pass


labelling = app.group("labelling", max_deliveries=5, retry_base_ms=60_000)


@labelling.once(ParcelShipped)
async def label(event: ParcelShipped, tx: Tx, ctx: HandlerContext) -> None:
    if ctx.attempt <= FAILS.get(event.parcel_id, 0):
        raise LookupError("the label printer is jammed")
    await tx.append(ParcelLabelled(parcel_id=event.parcel_id))


archiving = app.group("archiving")


@archiving.once(ParcelLabelled)
async def archive(event: ParcelLabelled, tx: Tx, ctx: HandlerContext) -> None:
    pass
"""

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


async def _parcels(app_dir: AppDir, sluice_harness: HarnessFactory, store: str) -> Harness:
    app_dir.module("parcels_app", PARCELS)
    return await sluice_harness("parcels_app", store=store)


async def _send(h: Harness, parcel_id: str, headers: dict[str, str] | None = None) -> str:
    async with h.client.post(
        "/v1/parcels/box", json={"parcel_id": parcel_id}, headers=headers or {}
    ) as r:
        assert r.status == 201, await r.text()
        return r.headers["X-Trace-Id"]


def _hex(value: int, width: int = 32) -> str:
    return f"{value:0{width}x}"


def _one(found: list[Any], **attributes: object) -> Any:
    matching = [s for s in found if all(s.attributes.get(k) == v for k, v in attributes.items())]
    assert len(matching) == 1, [(s.name, dict(s.attributes)) for s in found]
    return matching[0]


@pytest.mark.topologies("single", "cluster")
async def test_a_request_its_publication_and_its_handlers_are_one_trace(
    app_dir: AppDir, make_config: Callable[..., Config], spans: InMemorySpanExporter
) -> None:
    app_dir.module("parcels_app", PARCELS)
    async with open_harness(make_config(apps="parcels_app")) as h:
        await _one_trace(h, spans)


async def _one_trace(h: Harness, spans: InMemorySpanExporter) -> None:
    traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    assert await _send(h, "p1", {"traceparent": traceparent}) == CALLER_TRACE
    await h.drain()
    finished = spans.get_finished_spans()

    (server,) = [s for s in finished if s.kind == SpanKind.SERVER]
    assert server.name == "POST /v1/parcels/{kind}"
    assert _hex(server.context.trace_id) == CALLER_TRACE
    assert _hex(server.parent.span_id, 16) == CALLER_SPAN and server.parent.is_remote
    assert server.attributes["http.route"] == "/v1/parcels/{kind}"
    assert server.attributes["http.response.status_code"] == 201
    assert server.attributes["http.request.method"] == "POST"

    consumers = [s for s in finished if s.kind == SpanKind.CONSUMER]
    sent = (await h.events("ParcelShipped"))[0]
    label = _one(consumers, **{"messaging.consumer.group.name": "labelling"})
    assert label.context.trace_id == server.context.trace_id
    assert label.parent.span_id == server.context.span_id  # a child of the request's span
    assert label.name == "process parcels"
    assert label.status.status_code == StatusCode.UNSET
    assert dict(label.attributes) | {"sluice.stream.entry_id": "-"} == {
        "messaging.system": "redis",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "parcels",
        "messaging.consumer.group.name": "labelling",
        "messaging.message.id": sent.event_id,
        "sluice.stream.entry_id": "-",
        "sluice.stream.key": label.attributes["sluice.stream.key"],
        "sluice.event.type": "ParcelShipped",
        "sluice.delivery.attempt": 1,
    }
    # What the handler appended is handled in the same trace, under the handler's span.
    assert label.attributes["sluice.stream.key"].endswith(":parcels")  # the Redis key
    archive = _one(consumers, **{"messaging.consumer.group.name": "archiving"})
    assert archive.context.trace_id == server.context.trace_id
    assert archive.parent.span_id == label.context.span_id

    producers = [s for s in finished if s.kind == SpanKind.PRODUCER]
    linked = {link.context.span_id for p in producers for link in p.links}
    assert {server.context.span_id, label.context.span_id} <= linked
    assert all(p.attributes["messaging.system"] == "redis" for p in producers)
    assert sum(p.attributes["messaging.batch.message_count"] for p in producers) == 2


async def test_each_attempt_of_a_retried_handler_is_a_span_of_its_own(
    app_dir: AppDir,
    sluice_harness: HarnessFactory,
    sluice_store_kind: str,
    spans: InMemorySpanExporter,
) -> None:
    h = await _parcels(app_dir, sluice_harness, sluice_store_kind)
    import parcels_app  # type: ignore[import-not-found]

    parcels_app.FAILS["p2"] = 2
    trace_id = await _send(h, "p2")  # no traceparent: the trace starts here, as before
    await h.drain()
    attempts = sorted(
        (
            s
            for s in spans.get_finished_spans()
            if s.kind == SpanKind.CONSUMER
            and s.attributes["messaging.consumer.group.name"] == "labelling"
        ),
        key=lambda s: s.attributes["sluice.delivery.attempt"],
    )
    assert [s.attributes["sluice.delivery.attempt"] for s in attempts] == [1, 2, 3]
    assert [s.status.status_code for s in attempts] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    assert {_hex(s.context.trace_id) for s in attempts} == {trace_id}
    (server,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert {s.parent.span_id for s in attempts} == {server.context.span_id}
    failed = attempts[0]
    assert failed.attributes["error.type"] == "LookupError"
    (exception,) = [e for e in failed.events if e.name == "exception"]
    assert exception.attributes["exception.message"] == "the label printer is jammed"


async def test_without_tracing_no_span_is_made_and_events_carry_no_traceparent(
    app_dir: AppDir, sluice_harness: HarnessFactory
) -> None:
    h = await _parcels(app_dir, sluice_harness, "sqlite")
    assert not tracing.ENABLED
    exporter = InMemorySpanExporter()  # not installed: nothing may reach it
    trace_id = await _send(h, "p3", {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
    assert trace_id == CALLER_TRACE  # the trace id is continued all the same
    await h.drain()
    assert exporter.get_finished_spans() == ()
    rows = await h.store.fetchall("SELECT traceparent FROM events")
    assert rows and all(r[0] is None for r in rows)


async def test_a_job_scheduled_in_a_request_runs_in_the_requests_trace(
    app_dir: AppDir,
    sluice_harness: HarnessFactory,
    sluice_store_kind: str,
    spans: InMemorySpanExporter,
) -> None:
    h = await _parcels(app_dir, sluice_harness, sluice_store_kind)
    trace_id = await _send(h, "p4", {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
    await h.drain()
    assert (await h.advance(timedelta(hours=2))).jobs_fired == 1
    finished = spans.get_finished_spans()
    (server,) = [s for s in finished if s.kind == SpanKind.SERVER]
    (run,) = [
        s
        for s in finished
        if s.kind == SpanKind.CONSUMER and s.attributes["sluice.event.type"] == "JobDue"
    ]
    assert _hex(run.context.trace_id) == trace_id == CALLER_TRACE
    assert run.name == "run chase"  # a span of its own, linked to the scheduling request
    assert run.parent is None
    assert [link.context.span_id for link in run.links] == [server.context.span_id]
    assert run.attributes["messaging.destination.name"] == "delayed"


async def test_a_failed_request_is_an_error_span_with_its_exception(
    app_dir: AppDir, sluice_harness: HarnessFactory, spans: InMemorySpanExporter
) -> None:
    h = await _parcels(app_dir, sluice_harness, "sqlite")
    async with h.client.get("/v1/parcels/p5/label") as r:
        assert r.status == 500
    (server,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert server.name == "GET /v1/parcels/{parcel_id}/label"
    assert server.status.status_code == StatusCode.ERROR
    assert server.attributes["http.response.status_code"] == 500
    assert server.attributes["error.type"] == "RuntimeError"
    (exception,) = [e for e in server.events if e.name == "exception"]
    assert exception.attributes["exception.message"] == "the label store is gone"
