"""Tracing as a team's collector sees it (docs/guides/tracing.md): sluice's processes,
given the standard OTLP variables, export over OTLP/HTTP to a receiver here that decodes
the protocol's own messages. A registration's SERVER span continues the caller's
traceparent, the relay's PRODUCER span links it and the ``mail`` group's CONSUMER span
is its child, all in the caller's trace, whether ``sluice up`` runs everything (and
flushes at Ctrl-C) or the API, relay and worker run as processes of their own, on
either store, on one Redis or a Redis Cluster; a redirect's visit reaches ``link-stats``
in the redirect's trace."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from sluice.app.testing import Child, patience, wait_for
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from tests.otlp_receiver import Receiver, deploy
from tests.otlp_receiver import attributes as _attributes

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


@pytest.mark.slow
async def test_a_registration_is_one_trace_from_the_callers_span_to_the_mail_handler(
    tmp_path: Path, otlp_receiver: tuple[Receiver, int]
) -> None:
    found, otlp_port = otlp_receiver
    port, data = free_port(), tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
    env.update(
        SLUICE_DATA_DIR=str(data),
        SLUICE_PORT=str(port),
        SLUICE_LOG_LEVEL="info",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp_port}",
        OTEL_SERVICE_NAME="shop",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=test",
        OTEL_BSP_SCHEDULE_DELAY="200",
    )
    log = tmp_path / "up.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sluice",
            "up",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:

            async def answering() -> bool:
                try:
                    async with http.get(f"{url}/healthz") as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_for(answering, timeout=60)
            headers = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
            body = {"email": "ada@example.org", "password": "lovelace-1815", "name": "Ada"}
            async with http.post(f"{url}/v1/users", json=body, headers=headers) as response:
                assert response.status == 201, await response.text()
                assert response.headers["X-Trace-Id"] == CALLER_TRACE

        trace_id = bytes.fromhex(CALLER_TRACE)

        def mail_span() -> list[Span]:
            return [
                s
                for s in found.of_kind(Span.SPAN_KIND_CONSUMER)
                if _attributes(s).get("messaging.consumer.group.name") == "mail"
                and s.trace_id == trace_id
            ]

        async def mailed() -> bool:
            return bool(mail_span())

        await wait_for(mailed, timeout=30)
        (server,) = [s for s in found.of_kind(Span.SPAN_KIND_SERVER) if s.name == "POST /v1/users"]
        assert server.trace_id == trace_id
        assert server.parent_span_id == bytes.fromhex(CALLER_SPAN)
        assert _attributes(server)["http.response.status_code"] == 201
        (mail,) = mail_span()
        assert mail.parent_span_id == server.span_id
        assert _attributes(mail)["messaging.destination.name"] == "users"
        assert _attributes(mail)["messaging.system"] == "redis"
        producers = found.of_kind(Span.SPAN_KIND_PRODUCER)
        assert any(
            link.trace_id == trace_id and link.span_id == server.span_id
            for p in producers
            for link in p.links
        )
        resource, _ = found.spans[0]
        assert resource["service.name"] == "shop"
        assert resource["deployment.environment.name"] == "test"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                assert await asyncio.wait_for(process.wait(), patience(30)) == 0, log.read_text()[
                    -3000:
                ]
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()


@pytest.mark.slow
@pytest.mark.topologies("single", "cluster")
async def test_api_relay_and_worker_processes_export_one_trace_per_request(
    otlp_receiver: tuple[Receiver, int],
    make_config: Callable[..., Config],
    sluice_spawn: Callable[..., Child],
) -> None:
    found, otlp_port = otlp_receiver
    port = free_port()
    config = make_config(apps="links,accounts", port=port)
    url = await deploy(sluice_spawn, config, otlp_port, port, "mail", "link-stats")
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    async with aiohttp.ClientSession(url) as http:
        user = {"email": "grace@example.org", "password": "correct horse battery"}
        async with http.post("/v1/users", json=user, headers=caller) as registered:
            assert registered.status == 201, await registered.text()
        async with http.post("/v1/tokens", json=user) as issued:
            bearer = {"Authorization": f"Bearer {(await issued.json())['token']}"}
        async with http.post(
            "/v1/links", json={"url": "https://example.com/t"}, headers=bearer
        ) as created:
            assert created.status == 201, await created.text()
            code = (await created.json())["code"]
        async with http.get(f"/{code}", allow_redirects=False) as followed:
            assert followed.status == 302
            visit_trace = bytes.fromhex(followed.headers["X-Trace-Id"])

    def handled(group: str, trace_id: bytes) -> list[Span]:
        return [
            s
            for s in found.of_kind(Span.SPAN_KIND_CONSUMER)
            if _attributes(s).get("messaging.consumer.group.name") == group
            and s.trace_id == trace_id
        ]

    def redirects() -> list[Span]:
        return [s for s in found.of_kind(Span.SPAN_KIND_SERVER) if s.name == "GET /{code}"]

    def published(span_id: bytes) -> bool:
        """Whether a relay's producer span links to ``span_id`` (the relay's batches are
        exported on their own schedule, maybe after the handler's span)."""
        producers = found.of_kind(Span.SPAN_KIND_PRODUCER)
        return any(link.span_id == span_id for p in producers for link in p.links)

    async def both_handled() -> bool:
        mails = handled("mail", bytes.fromhex(CALLER_TRACE))
        return bool(mails) and published(mails[0].parent_span_id) and bool(redirects())

    await found.until(both_handled, timeout=30)
    (registration,) = [
        s for s in found.of_kind(Span.SPAN_KIND_SERVER) if s.name == "POST /v1/users"
    ]
    assert registration.parent_span_id == bytes.fromhex(CALLER_SPAN)
    (mail,) = handled("mail", registration.trace_id)
    assert mail.parent_span_id == registration.span_id
    assert published(registration.span_id)
    # A redirect is traced too (tracing turns the faster redirect paths off), in the
    # trace its X-Trace-Id names. Its visit reaching link-stats: test_tracing_visits.py.
    (redirect,) = redirects()
    assert redirect.trace_id == visit_trace
    assert _attributes(redirect)["http.response.status_code"] == 302
    assert _attributes(redirect)["http.route"] == "/{code}"
    services = {resource["service.name"] for resource, _ in found.spans}
    assert services == {"api", "relay", "worker"}
