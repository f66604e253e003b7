"""Runs and what becomes of an entry, as spans (docs/guides/tracing.md), kept by the SDK's
in-memory exporter (the ``spans`` fixture): a task's run is a span of its own in the
run's trace, with what it appends handled under it; a delayed job's run is a root span
in the trace of the request that scheduled it, linked to the request's span; a failed
attempt's span says whether it is retried or dead-lettered; a reclaimed entry's attempt
says from whom."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sluice.app.testing import Harness, open_harness, wait_for
from sluice.builtin.articles.events import ArticleViewed
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.consumers.dispatch import event_group
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.app_helpers import AppDir
from tests.integration.helpers import post_views
from tests.integration.tracing_runs_helpers import ERRANDS

pytestmark = pytest.mark.topologies("single", "cluster")

CALLER_TRACE = "5bf92f3577b34da6a3ce929d0e0e4737"
CALLER_SPAN = "10f067aa0ba902b8"
TOKEN = "errands-admin-token-0123456789abcdef"


@pytest.fixture
async def errands(
    app_dir: AppDir, make_config: Callable[..., Config], spans: InMemorySpanExporter
) -> AsyncIterator[Harness]:
    app_dir.module("errands_app", ERRANDS)
    async with open_harness(make_config(apps="errands_app", admin_token=TOKEN)) as opened:
        yield opened


async def _plan(h: Harness, errand_id: str, sampled: str = "01", **body: object) -> str:
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-{sampled}"}
    body = {"errand_id": errand_id, **body}
    async with h.client.post("/v1/errands", json=body, headers=caller) as r:
        assert r.status == 201, await r.text()
        return r.headers["X-Trace-Id"]


def _hex(value: int, width: int = 32) -> str:
    return f"{value:0{width}x}"


def _named(found: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in found.get_finished_spans() if s.name == name]


def _of_group(found: InMemorySpanExporter, group: str) -> list[Any]:
    return sorted(
        (
            s
            for s in found.get_finished_spans()
            if s.attributes.get("messaging.consumer.group.name") == group
        ),
        key=lambda s: s.attributes.get("sluice.delivery.attempt", 0),
    )


async def test_a_task_run_is_a_span_of_its_own_and_its_events_are_handled_under_it(
    errands: Harness, spans: InMemorySpanExporter
) -> None:
    run = await errands.run_task("sweep")
    await errands.drain()
    (span,) = _named(spans, "run sweep")
    assert span.kind == SpanKind.INTERNAL
    assert span.parent is None  # a trace of its own: the run's, as its record says
    assert _hex(span.context.trace_id) == run.trace_id
    assert dict(span.attributes) == {
        "sluice.task.name": "sweep",
        "sluice.task.run_id": run.id,
        "sluice.task.trigger": "manual",
        "sluice.task.scheduled_for": span.attributes["sluice.task.scheduled_for"],
        "sluice.task.outcome": "succeeded",
    }
    assert span.status.status_code == StatusCode.UNSET
    (noted,) = _of_group(spans, "noting")
    assert noted.parent.span_id == span.context.span_id  # the run's event, handled under it
    (swept,) = [e for e in await errands.events("ErrandNoted") if e.errand_id == "swept"]  # type: ignore[attr-defined]
    assert swept.trace_id == run.trace_id  # the event carries the run's trace id too


async def test_a_manual_run_is_linked_to_the_request_that_started_it(
    errands: Harness, spans: InMemorySpanExporter
) -> None:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
    }
    async with errands.client.post("/v1/admin/tasks/sweep/runs", headers=headers) as r:
        assert r.status == 202, await r.text()
        started = await r.json()

    async def ran() -> bool:
        return bool(_named(spans, "run sweep"))

    await wait_for(ran, timeout=30)
    (run,) = _named(spans, "run sweep")
    (server,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert _hex(run.context.trace_id) == started["trace_id"] != CALLER_TRACE
    assert run.parent is None
    assert [link.context.span_id for link in run.links] == [server.context.span_id]
    assert run.attributes["sluice.task.run_id"] == started["run_id"]


async def test_a_failed_task_run_is_an_error_span_with_its_exception(
    errands: Harness, spans: InMemorySpanExporter
) -> None:
    import errands_app  # type: ignore[import-not-found]

    errands_app.SWEEP["fails"] = True
    try:
        run = await errands.run_task("sweep", raise_failure=False)
    finally:
        errands_app.SWEEP["fails"] = False
    assert run.status == "failed"
    (span,) = _named(spans, "run sweep")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["sluice.task.outcome"] == "failed"
    (exception,) = [e for e in span.events if e.name == "exception"]
    assert exception.attributes["exception.type"] == "RuntimeError"
    assert exception.attributes["exception.message"] == "the broom broke"


async def test_a_job_runs_in_the_trace_of_the_request_that_scheduled_it_linked_to_it(
    errands: Harness, spans: InMemorySpanExporter
) -> None:
    assert await _plan(errands, "e1") == CALLER_TRACE
    await errands.drain()
    assert (await errands.advance(timedelta(hours=2))).jobs_fired == 1
    (server,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    (run,) = _named(spans, "run remind")
    assert run.kind == SpanKind.CONSUMER
    assert _hex(run.context.trace_id) == CALLER_TRACE  # the request's trace...
    assert run.parent is None  # ...but not under the request, which ended an hour before
    assert [link.context.span_id for link in run.links] == [server.context.span_id]
    attributes = run.attributes
    assert (attributes["sluice.job.name"], attributes["sluice.job.key"]) == ("remind", "e1")
    assert attributes["sluice.job.priority"] == 7
    assert {"sluice.job.due_at", "sluice.job.fired_at"} <= set(attributes)
    assert attributes["sluice.delivery.attempt"] == 1
    # What the job appended is handled under its run; no group made a span of its own
    # for the JobDue entry it read.
    (told,) = _of_group(spans, "telling")
    assert told.parent.span_id == run.context.span_id
    assert not [s for s in spans.get_finished_spans() if s.name == "process delayed"]


async def test_the_job_of_an_unsampled_request_makes_no_span(
    errands: Harness, spans: InMemorySpanExporter
) -> None:
    await _plan(errands, "e2", sampled="00")
    await errands.drain()
    assert (await errands.advance(timedelta(hours=2))).jobs_fired == 1
    assert [r async for r in _ran(errands)] == ["e2"]  # it ran, unrecorded, and so did
    # the handlers of what it appended, the request's decision travelling with it
    assert await errands.handled("telling")
    assert not [s for s in spans.get_finished_spans() if _hex(s.context.trace_id) == CALLER_TRACE]


async def _ran(h: Harness) -> AsyncIterator[str]:
    for event in await h.events("ErrandReminded"):
        yield event.errand_id  # type: ignore[attr-defined]


async def test_a_failed_attempt_says_it_is_retried_and_the_last_one_its_dead_letter(
    errands: Harness, spans: InMemorySpanExporter
) -> None:
    await _plan(errands, "e3", fails=5)
    drained = await errands.drain(raise_dead_letters=False)
    assert len(drained.failures) == 1
    attempts = _of_group(spans, "noting")
    assert [s.attributes["sluice.delivery.attempt"] for s in attempts] == [1, 2, 3]
    assert {s.status.status_code for s in attempts} == {StatusCode.ERROR}
    outcomes = [[e for e in s.events if e.name != "exception"] for s in attempts]
    assert [[e.name for e in events] for events in outcomes] == [
        ["sluice.retry"],
        ["sluice.retry"],
        ["sluice.dead_lettered"],
    ]
    assert outcomes[0][0].attributes["sluice.retry.delay_ms"] > 0
    (dead,) = outcomes[2]
    dead_key = errands.resources.keys.dead("noting", errands.resources.keys.partition_of("e3"))
    assert dict(dead.attributes) == {
        "sluice.dead_letter.reason": "LookupError: the notebook is lost (attempt 3)",
        "sluice.dead_letter.key": dead_key,
        "sluice.delivery.attempt": 3,
    }
    ends = [(s.end_time, e.timestamp) for s, es in zip(attempts, outcomes, strict=True) for e in es]
    assert all(end >= at for end, at in ends)  # each outcome told within its attempt


async def test_an_entry_dead_lettered_without_an_attempt_gets_a_span_of_its_own(
    errands: Harness, spans: InMemorySpanExporter
) -> None:
    keys = errands.resources.keys
    stream = keys.stream("errands", keys.partition_of("e4"))
    fields = {"event_id": "broken-1", "seq": "0", "type": "ErrandNoted", "data": "{"}
    await errands.resources.redis.xadd(stream, fields)  # type: ignore[arg-type]
    await errands.drain(raise_dead_letters=False)
    (span,) = _named(spans, "dead-letter noting")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["messaging.message.id"] == "broken-1"
    (dead,) = span.events
    assert dead.name == "sluice.dead_lettered"
    assert dead.attributes["sluice.dead_letter.reason"].startswith("PoisonMessage")
    assert dead.attributes["sluice.dead_letter.key"] == keys.dead("noting", keys.partition_of("e4"))


async def test_a_reclaimed_entrys_attempt_says_which_consumer_held_it(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    spans: InMemorySpanExporter,
) -> None:
    relay = start_relay()
    await post_views(resources, "r1", 1)

    async def published() -> bool:
        return relay.published >= 1

    await wait_for(published)
    stream = resources.keys.stream("articles", resources.keys.partition_of("r1"))
    await resources.redis.xgroup_create(stream, "watching", id="0", mkstream=True)
    # A consumer that reads the view and dies without acking it.
    assert await resources.redis.xreadgroup("watching", "ghost", {stream: ">"}, count=10)

    async def watch(event: ArticleViewed, deps: object) -> None:
        pass

    spec = event_group("watching", ("articles",), {ArticleViewed: watch}, None, 1)
    start_worker(spec=spec, name="survivor")  # claim_idle_ms is 1000 in tests

    async def reclaimed() -> bool:
        return bool(_of_group(spans, "watching"))

    await wait_for(reclaimed, timeout=30)
    (attempt,) = _of_group(spans, "watching")
    assert attempt.attributes["sluice.delivery.attempt"] == 2
    (event,) = [e for e in attempt.events if e.name == "sluice.reclaimed"]
    assert event.attributes["sluice.reclaimed.from_consumer"] == "ghost"
    assert event.attributes["sluice.reclaimed.idle_ms"] >= resources.config.claim_idle_ms
