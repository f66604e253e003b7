"""Unexpected failures become one logged 500 problem (503 when the database or Redis is
down); every request gets one summary line; problem answers are never sniffed; a
client's X-Request-ID is logged beside the trace id, never as it."""

from __future__ import annotations

import asyncio

import pytest
import structlog
from aiohttp import web

from sluice.app.assembly import create_app
from sluice.config import Config
from sluice.store import Store
from sluice.telemetry.logs import add_request
from tests.api.helpers import AiohttpClient, Client, problem, stored_events
from tests.link_helpers import add_link, add_user, bearer
from tests.sqlite_helpers import write_locked


async def boom(request: web.Request) -> web.Response:
    raise RuntimeError("kaboom")


@pytest.fixture
async def booming(aiohttp_client: AiohttpClient, config: Config) -> Client:
    """The API with one more route, ``GET /boom``, that fails unexpectedly."""
    app = create_app(config)
    app.router.add_get("/boom", boom)
    return await aiohttp_client(app)


async def test_an_unexpected_error_is_a_logged_500_problem(booming: Client) -> None:
    client = booming
    with structlog.testing.capture_logs(processors=[add_request]) as logs:
        response = await client.get("/boom", headers={"X-Request-ID": "trace-boom-1"})
        body = await problem(response, 500)
    assert "kaboom" not in body["detail"]  # internals stay in the logs
    trace_id = response.headers["X-Trace-Id"]
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert len(errors) == 1
    assert errors[0]["exc_info"] is True
    assert (errors[0]["trace_id"], errors[0]["request_id"]) == (trace_id, "trace-boom-1")
    [summary] = [entry for entry in logs if entry["event"] == "request"]
    assert summary["status"] == 500


async def test_one_summary_line_per_request(aiohttp_client: AiohttpClient, config: Config) -> None:
    client = await aiohttp_client(create_app(config))
    with structlog.testing.capture_logs(processors=[add_request]) as logs:
        await client.get("/healthz", headers={"X-Request-ID": "trace-ok-1"})
        await client.get("/missing")
    summaries = [entry for entry in logs if entry["event"] == "request"]
    assert [(s["method"], s["path"], s["status"]) for s in summaries] == [
        ("GET", "/healthz", 200),
        ("GET", "/missing", 404),
    ]
    assert summaries[0]["request_id"] == "trace-ok-1"
    # Context is cleared per request: the second one has its own trace id, no request id.
    assert summaries[1]["trace_id"] not in ("", summaries[0]["trace_id"])
    assert "request_id" not in summaries[1]
    assert all(s["duration_ms"] >= 0 for s in summaries)


async def redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/healthz")


async def test_a_raised_redirect_passes_through_with_its_trace_id(
    aiohttp_client: AiohttpClient, config: Config
) -> None:
    app = create_app(config)
    app.router.add_get("/go", redirect)
    client = await aiohttp_client(app)
    with structlog.testing.capture_logs(processors=[add_request]) as logs:
        response = await client.get("/go", allow_redirects=False)
    assert response.status == 302
    assert response.headers["Location"] == "/healthz"
    assert len(response.headers["X-Trace-Id"]) == 32
    assert [e["status"] for e in logs if e["event"] == "request"] == [302]


@pytest.mark.stores("sqlite")  # SQLite's file lock; PostgreSQL outages: test_postgres_outage.py
async def test_a_locked_database_is_a_503_problem_and_nothing_is_written(
    client: Client, store: Store, config: Config
) -> None:
    await add_user(store)
    for connection in (store._writer, store._reader):  # type: ignore[attr-defined]
        await connection.execute("PRAGMA busy_timeout=100")  # not 10 s per request
    with (
        write_locked(config.sqlite_path),
        structlog.testing.capture_logs(processors=[add_request]) as logs,
    ):
        for path, body in (
            ("/v1/users", {"email": "ada@example.org", "password": "correct horse"}),
            ("/v1/links", {"url": "https://example.org/"}),
            ("/v1/reminders", {"cron": "0 0 9 * * *", "timezone": "UTC", "text": "Hello"}),
        ):
            response = await client.post(path, json=body, headers=bearer())
            answer = await problem(response, 503)
            assert answer["detail"] == "the database is unavailable; try again later", path
            assert response.headers["Retry-After"] == "5"
    assert [(e["dependency"], e["log_level"]) for e in logs if "dependency" in e] == [
        ("the database", "error")
    ] * 3
    assert await stored_events(store) == []
    retried = await client.post(
        "/v1/users", json={"email": "ada@example.org", "password": "correct horse"}
    )
    assert retried.status == 201  # the lock is gone: the same request goes through


async def raw_status(client: Client, request: bytes) -> int:
    """The status of a request sent byte for byte (the client would refuse non-UTF-8 headers)."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    try:
        writer.write(request)
        await writer.drain()
        status_line = await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()
    return int(status_line.split()[1])


async def test_headers_that_are_not_utf8_get_their_answer_not_a_500(
    client: Client, store: Store
) -> None:
    await add_link(store, "bytes1", "https://example.org/")
    bad = b"\xff\xfe"
    redirect = b"GET /bytes1 HTTP/1.1\r\nHost: x\r\nUser-Agent: " + bad + b"\r\n\r\n"
    assert await raw_status(client, redirect) == 302  # the visit is hashed from the bytes
    view = (
        b"POST /v1/articles/a1/views HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\nUser-Agent: " + bad + b"\r\n\r\n{}"
    )
    assert await raw_status(client, view) == 202
    me = b"GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + bad + b"\r\n\r\n"
    assert await raw_status(client, me) == 401


async def test_problem_answers_tell_browsers_not_to_sniff_them(booming: Client) -> None:
    client = booming
    reflected = "/v1/<script>alert(1)</script>"  # the 404's detail names the path
    for method, path, status in [
        ("GET", reflected, 404),
        ("GET", "/nosuchcode", 404),
        ("DELETE", "/healthz", 405),
        ("GET", "/v1/me", 401),
        ("POST", "/v1/users", 400),
        ("GET", "/boom", 500),
    ]:
        response = await client.request(method, path)
        await problem(response, status)
        assert response.headers["X-Content-Type-Options"] == "nosniff", (method, path)


async def test_a_client_s_request_id_is_logged_but_never_names_a_trace(
    client: Client, store: Store
) -> None:
    """Two clients that send the same X-Request-ID (by chance or on purpose) stay in two
    traces: /admin never shows one's events in the other's trace."""
    shared = {"X-Request-ID": "shared-request-0001"}
    with structlog.testing.capture_logs(processors=[add_request]) as logs:
        first = await client.post("/v1/articles/a1/views", json={"viewer": "al"}, headers=shared)
        second = await client.post("/v1/articles/a2/views", json={"viewer": "bo"}, headers=shared)
    traces = [first.headers["X-Trace-Id"], second.headers["X-Trace-Id"]]
    assert traces[0] != traces[1]
    assert all(len(trace) == 32 and int(trace, 16) for trace in traces)
    assert [trace for _, trace in await stored_events(store)] == traces
    summaries = [entry for entry in logs if entry["event"] == "request"]
    assert [(s["trace_id"], s["request_id"]) for s in summaries] == [
        (trace, "shared-request-0001") for trace in traces
    ]
