"""Job runs and retries as a team's collector sees them (docs/guides/tracing.md): the
API, relay, scheduler and worker run as processes of their own and export over OTLP/HTTP
to a receiver here. A job scheduled in a request runs in that request's trace, a span
of its own linked to the request's; a retried handler's attempts are spans 1, 2, 3,
the failed ones errors that say when they are tried again."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from sluice.app.testing import Child
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from tests.app_helpers import AppDir
from tests.integration.tracing_runs_helpers import ERRANDS
from tests.otlp_receiver import Receiver, deploy
from tests.otlp_receiver import attributes as _attributes

pytestmark = [pytest.mark.slow, pytest.mark.topologies("single", "cluster")]

CALLER_TRACE = "1af7651916cd43dd8448eb211c80319d"
CALLER_SPAN = "c7ad6b7169203332"


async def _plan(
    app_dir: AppDir,
    make_config: Callable[..., Config],
    sluice_spawn: Callable[..., Child],
    otlp_port: int,
    **body: object,
) -> None:
    """The errands app deployed as four processes exporting to the receiver, and one
    errand planned through its API under the caller's span."""
    app_dir.module("errands_app", ERRANDS)
    port = free_port()
    config = make_config(apps="errands_app", port=port)
    groups = ("errands-jobs", "noting", "telling")
    url = await deploy(sluice_spawn, config, otlp_port, port, *groups, scheduler=True)
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    async with (
        aiohttp.ClientSession(url) as http,
        http.post("/v1/errands", json=body, headers=caller) as planned,
    ):
        assert planned.status == 201, await planned.text()
        assert planned.headers["X-Trace-Id"] == CALLER_TRACE


async def _until(found: Receiver, condition: Callable[[], bool]) -> None:
    async def holds() -> bool:
        return condition()

    await found.until(holds, timeout=60)


def _in_caller_trace(found: Receiver, name: str) -> list[Span]:
    trace_id = bytes.fromhex(CALLER_TRACE)
    return [s for _, s in found.spans if s.name == name and s.trace_id == trace_id]


async def test_a_job_scheduled_in_a_request_runs_in_its_trace_across_processes(
    app_dir: AppDir,
    make_config: Callable[..., Config],
    sluice_spawn: Callable[..., Child],
    otlp_receiver: tuple[Receiver, int],
) -> None:
    found, otlp_port = otlp_receiver
    await _plan(app_dir, make_config, sluice_spawn, otlp_port, errand_id="j1", remind_in_s=1)

    def told() -> bool:  # the job's run, and the handler of what it appended
        return bool(_in_caller_trace(found, "run remind")) and any(
            _attributes(s).get("messaging.consumer.group.name") == "telling"
            for s in _in_caller_trace(found, "process errands")
        )

    await _until(found, told)
    (server,) = _in_caller_trace(found, "POST /v1/errands")
    (run,) = _in_caller_trace(found, "run remind")
    assert run.kind == Span.SPAN_KIND_CONSUMER
    assert run.parent_span_id == b""  # a root in the request's trace, linked to it
    assert [(link.trace_id, link.span_id) for link in run.links] == [
        (server.trace_id, server.span_id)
    ]
    attributes = _attributes(run)
    assert (attributes["sluice.job.name"], attributes["sluice.job.key"]) == ("remind", "j1")
    assert attributes["sluice.job.priority"] == 7
    (tell,) = [
        s
        for s in _in_caller_trace(found, "process errands")
        if _attributes(s)["messaging.consumer.group.name"] == "telling"
    ]
    assert tell.parent_span_id == run.span_id
    services = {resource["service.name"] for resource, span in found.spans if span is run}
    assert services == {"worker"}


async def test_a_retried_handlers_attempts_are_spans_of_their_own_across_processes(
    app_dir: AppDir,
    make_config: Callable[..., Config],
    sluice_spawn: Callable[..., Child],
    otlp_receiver: tuple[Receiver, int],
) -> None:
    found, otlp_port = otlp_receiver
    await _plan(app_dir, make_config, sluice_spawn, otlp_port, errand_id="r1", fails=2)

    def attempts() -> list[Span]:
        return sorted(
            (
                s
                for s in _in_caller_trace(found, "process errands")
                if _attributes(s)["messaging.consumer.group.name"] == "noting"
            ),
            key=lambda s: int(_attributes(s)["sluice.delivery.attempt"]),
        )

    await _until(found, lambda: len(attempts()) == 3)
    spans = attempts()
    (server,) = _in_caller_trace(found, "POST /v1/errands")
    assert [_attributes(s)["sluice.delivery.attempt"] for s in spans] == [1, 2, 3]
    assert [s.status.code for s in spans] == [
        Status.STATUS_CODE_ERROR,
        Status.STATUS_CODE_ERROR,
        Status.STATUS_CODE_UNSET,
    ]
    assert {s.parent_span_id for s in spans} == {server.span_id}
    told = [[e.name for e in s.events if e.name != "exception"] for s in spans]
    assert told == [["sluice.retry"], ["sluice.retry"], []]
    assert [_attributes(s).get("error.type") for s in spans] == ["LookupError", "LookupError", None]
