"""A redirect's visit in its trace (docs/guides/tracing.md): the visit writer stores each
visit under the span of the redirect that recorded it, though it commits visits in
batches after the redirects were answered, whether the redirect went through the app or
(the link cached) was answered before it, with its span made there; a handler of the
visit is a child of that span, and a projection's batch (``link-stats`` counting visits)
is a CONSUMER span linked to the span that appended each event in it. In process
through the harness (spans kept by the SDK's in-memory exporter), and as a team's
collector sees it from separate API, relay and worker processes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from sluice.app.testing import Child, Harness, HarnessFactory, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from sluice.telemetry import tracing
from tests.app_helpers import AppDir
from tests.otlp_receiver import Receiver, attributes, deploy

CALLERS = (
    ("5bf92f3577b34da6a3ce929d0e0e4731", "10f067aa0ba902b1"),
    ("5bf92f3577b34da6a3ce929d0e0e4732", "10f067aa0ba902b2"),
)


async def _link(http: Any) -> str:
    """A new user's new link's code (``http``: an aiohttp client of the API)."""
    user = {"email": "ada@example.org", "password": "correct horse battery"}
    async with http.post("/v1/users", json=user) as registered:
        assert registered.status == 201, await registered.text()
    async with http.post("/v1/tokens", json=user) as issued:
        bearer = {"Authorization": f"Bearer {(await issued.json())['token']}"}
    async with http.post("/v1/links", json={"url": "https://example.com/t"}, headers=bearer) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["code"])


async def _stored_under(h: Harness) -> list[str | None]:
    rows = await h.store.fetchall(
        "SELECT traceparent FROM events WHERE type = 'LinkVisited' ORDER BY seq"
    )
    return [row[0] for row in rows]


def _parent(span: Any) -> str:
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


async def test_each_visit_is_stored_under_its_redirects_span_and_link_stats_links_them(
    sluice_harness: HarnessFactory, sluice_store_kind: str, spans: InMemorySpanExporter
) -> None:
    # The writer waits for three visits (or ten minutes): all commit in one append.
    h = await sluice_harness(
        "links,accounts", store=sluice_store_kind, visit_flush_ms=600_000, visit_batch=3
    )
    code = await _link(h.client)
    answered = []
    for caller in (*CALLERS, None):  # the last one without a traceparent: a trace of its own
        headers = {} if caller is None else {"traceparent": f"00-{caller[0]}-{caller[1]}-01"}
        async with h.client.get(f"/{code}", headers=headers, allow_redirects=False) as r:
            assert r.status == 302
            answered.append(r.headers["X-Trace-Id"])
    assert answered[:2] == [t for t, _ in CALLERS]

    async def committed() -> bool:
        return len(await h.events(LinkVisited)) == 3

    await wait_for(committed, timeout=10)
    finished = spans.get_finished_spans()
    redirects = [s for s in finished if s.kind == SpanKind.SERVER and s.name == "GET /{code}"]
    assert [f"{s.context.trace_id:032x}" for s in redirects] == answered
    assert [s.parent.span_id if s.parent else None for s in redirects] == [
        *(int(span_id, 16) for _, span_id in CALLERS),
        None,
    ]
    # The first GET looked the new link up through the app (the middleware's span); the
    # next ones, the link cached, were answered before the app, their spans made there.
    assert redirects[0].attributes["url.scheme"] == "http"
    assert [dict(s.attributes) for s in redirects[1:]] == [
        {
            "http.request.method": "GET",
            "url.path": f"/{code}",
            "http.route": "/{code}",
            "user_agent.original": redirects[0].attributes["user_agent.original"],
            "client.address": "127.0.0.1",
            "http.response.status_code": 302,
        }
    ] * 2
    # Each visit under its own redirect's span, not the writer's (it has none).
    assert await _stored_under(h) == [_parent(s) for s in redirects]
    assert [v.trace_id for v in await h.events(LinkVisited)] == answered

    await h.drain()
    counted = [
        s
        for s in spans.get_finished_spans()
        if s.kind == SpanKind.CONSUMER
        and s.attributes["messaging.consumer.group.name"] == "link-stats"
    ]
    assert counted, [(s.name, dict(s.attributes)) for s in spans.get_finished_spans()]
    assert {s.name for s in counted} == {"process visits"}
    assert all(s.parent is None for s in counted)  # a batch: linked, no one's child
    linked = [(link.context.trace_id, link.context.span_id) for s in counted for link in s.links]
    assert sorted(linked) == sorted((s.context.trace_id, s.context.span_id) for s in redirects)
    assert sum(s.attributes["messaging.batch.message_count"] for s in counted) == 3
    assert {s.attributes["messaging.destination.name"] for s in counted} == {"visits"}
    assert await h.handled("link-stats", LinkVisited)  # and the visits were counted


WATCH = """
from sluice.app import App, HandlerContext
from sluice.builtin.links.events import LinkVisited

app = App("watch")
watching = app.group("watching")


@watching.on(LinkVisited)
async def watch(event: LinkVisited, ctx: HandlerContext[None]) -> None:
    pass
"""


async def test_a_handler_of_a_visit_is_a_child_of_the_redirects_span(
    app_dir: AppDir, sluice_harness: HarnessFactory, spans: InMemorySpanExporter
) -> None:
    app_dir.module("watch_app", WATCH)
    h = await sluice_harness("links,accounts,watch_app")
    code = await _link(h.client)
    for _ in range(2):  # through the app, then (the link cached) before it
        async with h.client.get(f"/{code}", allow_redirects=False) as r:
            assert r.status == 302

    async def committed() -> bool:
        return len(await h.events(LinkVisited)) == 2

    await wait_for(committed, timeout=10)
    await h.drain()
    finished = spans.get_finished_spans()
    redirects = [s for s in finished if s.kind == SpanKind.SERVER and s.name == "GET /{code}"]
    watched = [
        s
        for s in finished
        if s.kind == SpanKind.CONSUMER
        and s.attributes["messaging.consumer.group.name"] == "watching"
    ]
    assert len(redirects) == 2
    assert sorted((s.context.trace_id, s.parent.span_id) for s in watched) == sorted(
        (s.context.trace_id, s.context.span_id) for s in redirects
    )


async def test_without_tracing_a_visit_is_stored_under_no_span(
    sluice_harness: HarnessFactory,
) -> None:
    h = await sluice_harness("links,accounts")
    assert not tracing.ENABLED
    code = await _link(h.client)
    headers = {"traceparent": f"00-{CALLERS[0][0]}-{CALLERS[0][1]}-01"}
    async with h.client.get(f"/{code}", headers=headers, allow_redirects=False) as r:
        assert r.status == 302

    async def committed() -> bool:
        return bool(await h.events(LinkVisited))

    await wait_for(committed, timeout=10)
    assert await _stored_under(h) == [None]
    assert [v.trace_id for v in await h.events(LinkVisited)] == [CALLERS[0][0]]


async def test_append_refuses_traceparents_that_do_not_name_one_per_event(
    sluice_harness: HarnessFactory, sluice_store_kind: str
) -> None:
    h = await sluice_harness("links,accounts", store=sluice_store_kind)
    visit = LinkVisited(code="abc123", visitor="v")
    with pytest.raises(ValueError, match="1 traceparents for 2 events"):
        async with h.store.transaction() as tx:
            await tx.append(visit, visit, traceparents=["00-" + "1" * 32 + "-" + "2" * 16 + "-01"])
    assert await h.events(LinkVisited) == []


async def test_appended_traceparents_keep_their_events_places_in_a_transaction(
    sluice_harness: HarnessFactory, sluice_store_kind: str
) -> None:
    h = await sluice_harness("links,accounts", store=sluice_store_kind)
    under = "00-" + "3" * 32 + "-" + "4" * 16 + "-01"
    async with h.store.transaction() as tx:
        await tx.append(LinkVisited(code="abc123", visitor="a"))  # tracing off: no span
        await tx.append(
            LinkVisited(code="abc123", visitor="b"),
            LinkVisited(code="abc123", visitor="c"),
            traceparents=[under, None],
        )
    assert await _stored_under(h) == [None, under, None]


@pytest.mark.slow
@pytest.mark.topologies("single", "cluster")
async def test_a_redirects_visit_reaches_link_stats_as_a_collector_sees_it(
    otlp_receiver: tuple[Receiver, int],
    make_config: Callable[..., Config],
    sluice_spawn: Callable[..., Child],
) -> None:
    found, otlp_port = otlp_receiver
    port = free_port()
    config = make_config(apps="links,accounts", port=port)
    url = await deploy(sluice_spawn, config, otlp_port, port, "link-stats")
    async with aiohttp.ClientSession(url) as http:
        code = await _link(http)
        # Twice: through the app (the link not cached yet), then before it (cached).
        trace_ids = []
        for _ in range(2):
            async with http.get(f"/{code}", allow_redirects=False) as followed:
                assert followed.status == 302
                trace_ids.append(bytes.fromhex(followed.headers["X-Trace-Id"]))

    def redirects() -> list[Span]:
        return [s for s in found.of_kind(Span.SPAN_KIND_SERVER) if s.name == "GET /{code}"]

    def linking(kind: int, span: Span) -> list[Span]:
        """The spans of ``kind`` with a link to ``span``."""
        return [
            s
            for s in found.of_kind(kind)
            if any((k.trace_id, k.span_id) == (span.trace_id, span.span_id) for k in s.links)
        ]

    def counted(kind: int) -> Callable[[], Awaitable[bool]]:
        async def linked() -> bool:
            servers = redirects()
            return len(servers) == 2 and all(linking(kind, s) for s in servers)

        return linked

    await found.until(counted(Span.SPAN_KIND_CONSUMER), timeout=30)
    servers = sorted(redirects(), key=lambda s: s.start_time_unix_nano)
    assert [s.trace_id for s in servers] == trace_ids  # the X-Trace-Ids' traces
    assert [attributes(s)["http.response.status_code"] for s in servers] == [302, 302]
    for server in servers:
        (stats,) = linking(Span.SPAN_KIND_CONSUMER, server)
        assert stats.name == "process visits"
        assert not stats.parent_span_id  # a batch's span: linked to its events, no one's child
        assert attributes(stats)["messaging.consumer.group.name"] == "link-stats"
        assert attributes(stats)["messaging.batch.message_count"] >= 1
        (worker,) = [r for r, s in found.spans if s.span_id == stats.span_id]
        assert worker["service.name"] == "worker"
    # The relay's batches are exported on their own schedule.
    await wait_for(counted(Span.SPAN_KIND_PRODUCER), timeout=30)
