"""A group's batch handler in a trace (docs/guides/tracing.md): each call is a CONSUMER
span linked to the span of every request whose event it got, a child of none of them,
and a call that raises is an error span with its exception. Through the in-process
harness, spans kept by the SDK's in-memory exporter."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sluice.app.testing import HarnessFactory
from tests.app_helpers import AppDir

CRATES = """
from collections.abc import Mapping, Sequence
from typing import ClassVar

import msgspec
from aiohttp import web
from sluice.app import App, Event, HandlerContext, json_response, read_json, store

app = App("crates")
app.aggregate("crates", key="crate_id")
JAMMED: set[str] = set()  # crates whose tally raises, once


@app.event
class CrateFilled(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "crates"
    crate_id: str


class Fill(msgspec.Struct, frozen=True):
    crate_id: str


@app.route("POST", "/v1/crates", doc={"operationId": "fillCrate", "summary": "fill",
           "responses": {"201": {"description": "filled"}}})
async def fill(request: web.Request) -> web.Response:
    body = await read_json(request, Fill)
    async with store(request).transaction() as tx:
        await tx.append(CrateFilled(crate_id=body.crate_id))
    return json_response({"id": body.crate_id}, 201)


@app.route("POST", "/v1/crate-pairs", doc={"operationId": "fillPair", "summary": "fill two",
           "responses": {"201": {"description": "filled"}}})
async def fill_pair(request: web.Request) -> web.Response:
    body = await read_json(request, Fill)
    async with store(request).transaction() as tx:
        await tx.append(
            CrateFilled(crate_id=f"{body.crate_id}-a"), CrateFilled(crate_id=f"{body.crate_id}-b")
        )
    return json_response({"id": body.crate_id}, 201)


tallying = app.group("tallying", max_deliveries=3, retry_base_ms=1)


@tallying.batch(CrateFilled)
async def tally(
    events: Sequence[CrateFilled], ctx: HandlerContext[None]
) -> Mapping[str, BaseException]:
    for event in events:
        if event.crate_id in JAMMED:
            JAMMED.discard(event.crate_id)
            raise LookupError(f"the scale under {event.crate_id} is jammed")
    return {}
"""

CALLERS = ("6bf92f3577b34da6a3ce929d0e0e4731", "6bf92f3577b34da6a3ce929d0e0e4732")


async def test_a_batch_handlers_call_is_one_span_linked_to_each_events_request(
    app_dir: AppDir,
    sluice_harness: HarnessFactory,
    sluice_store_kind: str,
    spans: InMemorySpanExporter,
) -> None:
    app_dir.module("tallies_app", CRATES)
    h = await sluice_harness("tallies_app", store=sluice_store_kind)
    import tallies_app  # type: ignore[import-not-found]

    tallies_app.JAMMED.add("c2")
    for n, trace_id in enumerate(CALLERS, 1):
        headers = {"traceparent": f"00-{trace_id}-{n:016x}-01"}
        async with h.client.post("/v1/crates", json={"crate_id": f"c{n}"}, headers=headers) as r:
            assert r.status == 201, await r.text()
    await h.drain()
    finished = spans.get_finished_spans()
    servers = [s for s in finished if s.kind == SpanKind.SERVER]
    calls = [
        s
        for s in finished
        if s.kind == SpanKind.CONSUMER
        and s.attributes["messaging.consumer.group.name"] == "tallying"
    ]
    assert {s.name for s in calls} == {"process crates"}
    assert all(s.parent is None for s in calls)  # a batch: linked, no one's child
    # The first call got both events and raised: an error span, linked to both requests.
    failed = [s for s in calls if s.status.status_code == StatusCode.ERROR]
    assert failed, [(s.name, s.status, dict(s.attributes)) for s in calls]
    assert failed[0].attributes["error.type"] == "LookupError"
    (exception,) = [e for e in failed[0].events if e.name == "exception"]
    assert exception.attributes["exception.message"] == "the scale under c2 is jammed"
    requests = {(s.context.trace_id, s.context.span_id) for s in servers}
    assert len(requests) == 2
    linked = {(k.context.trace_id, k.context.span_id) for s in calls for k in s.links}
    assert linked == requests
    # Then a call that succeeded, for the events the failed one left.
    assert any(s.status.status_code == StatusCode.UNSET for s in calls)
    counts = [s.attributes["messaging.batch.message_count"] for s in calls]
    assert counts[0] == 2, counts
    assert len(await h.handled("tallying")) == 2


async def test_the_events_one_request_appended_together_are_one_link(
    app_dir: AppDir,
    sluice_harness: HarnessFactory,
    sluice_store_kind: str,
    spans: InMemorySpanExporter,
) -> None:
    app_dir.module("pairs_app", CRATES)
    h = await sluice_harness("pairs_app", store=sluice_store_kind)
    headers = {"traceparent": f"00-{CALLERS[0]}-{7:016x}-01"}
    async with h.client.post("/v1/crate-pairs", json={"crate_id": "p"}, headers=headers) as r:
        assert r.status == 201, await r.text()
    await h.drain()
    finished = spans.get_finished_spans()
    (server,) = [s for s in finished if s.kind == SpanKind.SERVER]
    batches = [
        s
        for s in finished
        if s.kind in (SpanKind.CONSUMER, SpanKind.PRODUCER)
        and s.attributes.get("messaging.batch.message_count") == 2
    ]
    # The relay's batch and the group's call, each with both events and one link.
    assert {s.kind for s in batches} == {SpanKind.CONSUMER, SpanKind.PRODUCER}, batches
    for batch in batches:
        assert [(k.context.trace_id, k.context.span_id) for k in batch.links] == [
            (server.context.trace_id, server.context.span_id)
        ]


def test_a_batch_links_each_span_once_and_no_more_than_a_span_keeps(
    monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
) -> None:
    from sluice.telemetry import tracing

    parents = [f"00-{CALLERS[0]}-{n:016x}-01" for n in (1, 1, 2, 3, 2, 4, 5)]
    assert [k.context.span_id for k in tracing.links_to(parents)] == [1, 2, 3, 4, 5]
    # OTEL_SPAN_LINK_COUNT_LIMIT, read when tracing is set up: the first ones, no more
    # made than the span keeps.
    monkeypatch.setenv("OTEL_SPAN_LINK_COUNT_LIMIT", "3")
    tracing.install(tracing.new_provider("limited"))
    assert [k.context.span_id for k in tracing.links_to([None, *parents])] == [1, 2, 3]
