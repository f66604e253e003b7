"""An aiohttp the connections do not know (``sluice.http.aiohttp_compat``): a version
outside the tested minors, or a request handler without an attribute the wire path
reads. One warning at start, and every redirect still answered, in order, with the same
headers and its visit, by the request-level fast path instead of the wire."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.http import aiohttp_compat
from sluice.http.app_keys import STORE
from sluice.http.redirect_wire import WireRedirects
from tests.api.helpers import AiohttpClient
from tests.api.raw_http import CODE, URL, Connect, cached, get, visits_stored

HEAD = f"HEAD /{CODE} HTTP/1.1\r\nHost: sluice\r\n\r\n".encode()
TRACE = "0af7651916cd43dd8448eb211c80319c"  # a caller's, in its traceparent


@pytest.fixture(params=["version", "attribute"])
def unknown_aiohttp(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """An aiohttp unknown to the wire path; what its warning names as missing."""
    if request.param == "version":
        monkeypatch.setattr(aiohttp, "__version__", "3.15.0")
        return "aiohttp>=3.14.4,<3.15.0"
    made = web.RequestHandler.__init__

    def renamed(self: web.RequestHandler, *args: Any, **kwargs: Any) -> None:
        # Gone after construction, as if renamed; aiohttp's own connection_made sets it
        # again before anything of aiohttp reads it, so the server itself still works.
        made(self, *args, **kwargs)
        del self._next_keepalive_close_time

    monkeypatch.setattr(web.RequestHandler, "__init__", renamed)
    return "_next_keepalive_close_time"


@pytest.fixture
def wire_asked(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every head the wire was asked to answer."""
    asked: list[object] = []
    answer = WireRedirects.response

    def spied(self: WireRedirects, message: Any, remote: str | None) -> bytes | None:
        asked.append(message)
        return answer(self, message, remote)

    monkeypatch.setattr(WireRedirects, "response", spied)
    return asked


async def test_an_unknown_aiohttp_serves_redirects_through_the_request_path(
    unknown_aiohttp: str,
    wire_asked: list[object],
    aiohttp_client: AiohttpClient,
    config: Config,
    connect: Connect,
) -> None:
    with structlog.testing.capture_logs() as logs:
        client = await aiohttp_client(create_app(config))
        assert client.app is not None
        store = client.app[STORE]
        await cached(client, store)
        first, second = await connect(client), await connect(client)
        first.send(get(f"/{CODE}"), get("/healthz"), get(f"/{CODE}"), get("/nosuchcode"))
        second.send(HEAD, get(f"/{CODE}", f"traceparent: 00-{TRACE}-00f067aa0ba902b7-01"))
        answers = [await first.response() for _ in range(4)]
        head_answer = (await second.reader.readuntil(b"\r\n\r\n")).decode()
        last = await second.response()

    statuses = [status for status, _, _ in answers]
    assert statuses == [
        "HTTP/1.1 302 Found",
        "HTTP/1.1 200 OK",
        "HTTP/1.1 302 Found",
        "HTTP/1.1 404 Not Found",
    ]
    assert head_answer.startswith("HTTP/1.1 302 Found\r\n")
    assert last[0] == "HTTP/1.1 302 Found"
    for _, headers, body in (answers[0], answers[2], last):
        # As the wire path writes them (tests/api/test_redirect_wire.py).
        assert sorted(headers) == [
            "Cache-Control",
            "Content-Length",
            "Date",
            "Location",
            "Server",
            "X-Trace-Id",
        ]
        assert (headers["Location"], headers["Cache-Control"]) == (URL, "private, no-store")
        assert (headers["Content-Length"], headers["Server"], body) == ("0", SERVER_SOFTWARE, b"")
    assert [len(answers[i][1]["X-Trace-Id"]) for i in (0, 2)] == [32, 32]
    assert last[1]["X-Trace-Id"] == TRACE  # the caller's, as on the wire
    await wait_for(visits_stored(store, 4), timeout=10)  # the GETs, with the one that cached
    assert wire_asked == []
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["aiohttp"] == aiohttp.__version__
    assert unknown_aiohttp in warning["missing"]


async def test_without_what_the_head_deadline_reads_the_keepalive_timeout_still_closes(
    aiohttp_client: AiohttpClient,
    make_config: Callable[..., Config],
    connect: Connect,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An aiohttp without the handler attributes the head deadline reads: the API serves
    without the deadline (it would fail every connection), and a head that never
    completes is closed by aiohttp's keep-alive timeout instead."""
    names = (*aiohttp_compat.HEAD_DEADLINE_NAMES, "_renamed_in_a_later_aiohttp")
    monkeypatch.setattr(aiohttp_compat, "HEAD_DEADLINE_NAMES", names)
    config = make_config(header_timeout_seconds=0.3, keepalive_timeout_seconds=2)
    with structlog.testing.capture_logs() as logs:
        client = await aiohttp_client(create_app(config))
    assert client.app is not None
    await cached(client, client.app[STORE])
    wire = await connect(client)
    opened = time.monotonic()
    wire.send(get(f"/{CODE}"))
    assert (await wire.response())[0] == "HTTP/1.1 302 Found"
    wire.send(b"GET /healthz HTTP/1.1\r\nHost: s")  # and nothing more
    assert await wire.closed() == b""
    assert time.monotonic() - opened >= 1.8  # the keep-alive timeout, not the deadline
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert "no head deadline" in warning["event"]
    assert warning["missing"] == ["_renamed_in_a_later_aiohttp"]
