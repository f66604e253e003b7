"""Redirects answered on the wire (``sluice.http.redirect_wire``), over raw sockets: the
same status line and headers as aiohttp writes, the caller's visit, answers in the order
of their requests when redirects and other requests are pipelined or the client stops
reading, and the connection's keep-alive, head deadline and close as before."""

from __future__ import annotations

import asyncio
import email.utils
import fcntl
import socket
import struct
import termios
import time
from collections.abc import Callable

import pytest
from aiohttp.http import SERVER_SOFTWARE

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.http.keys import VISITS
from sluice.config import Config
from sluice.http.app_keys import STORE, VISITOR_KEY
from sluice.http.redirect_wire import WireRedirects
from sluice.http.visitors import visitor_hash
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, stored_events
from tests.api.raw_http import CODE, URL, Connect, Wire, cached, get, visits_stored
from tests.link_helpers import CHROME, add_user, bearer


async def visits(store: Store) -> list[tuple[LinkVisited, str]]:
    return [(e, trace) for e, trace in await stored_events(store) if isinstance(e, LinkVisited)]


async def test_a_redirect_on_the_wire_has_the_status_line_and_headers_aiohttp_writes(
    client: Client, store: Store, connect: Connect
) -> None:
    await cached(client, store)
    wire = await connect(client)
    # The first is answered on the wire; the last waits behind /healthz, so aiohttp
    # answers it (with fast_redirect's web.Response).
    wire.send(get(f"/{CODE}"), get("/healthz"), get(f"/{CODE}"))
    status, headers, body = await wire.response()
    await wire.response()
    aiohttp_status, aiohttp_headers, aiohttp_body = await wire.response()

    assert status == aiohttp_status == "HTTP/1.1 302 Found"
    assert body == aiohttp_body == b""
    assert sorted(headers) == sorted(aiohttp_headers)
    assert headers["Location"] == aiohttp_headers["Location"] == URL
    assert headers["Cache-Control"] == aiohttp_headers["Cache-Control"] == "private, no-store"
    assert headers["Content-Length"] == aiohttp_headers["Content-Length"] == "0"
    assert headers["Server"] == aiohttp_headers["Server"] == SERVER_SOFTWARE
    date = email.utils.parsedate_to_datetime(headers["Date"]).timestamp()
    assert abs(date - time.time()) < 5
    assert len(headers["X-Trace-Id"]) == 32
    assert headers["X-Trace-Id"] != aiohttp_headers["X-Trace-Id"]


@pytest.mark.parametrize("status", [301, 307, 308])
async def test_a_link_s_own_redirect_status_is_written_with_its_reason(
    client: Client, store: Store, connect: Connect, status: int
) -> None:
    await cached(client, store)
    await add_user(store)
    response = await client.patch(
        f"/v1/links/{CODE}", json={"redirect_status": status}, headers=bearer()
    )
    assert response.status == 200, await response.text()
    assert (await client.get(f"/{CODE}", allow_redirects=False)).status == status  # cached
    wire = await connect(client)
    wire.send(get(f"/{CODE}"))
    line, headers, _ = await wire.response()
    reason = {301: "Moved Permanently", 307: "Temporary Redirect", 308: "Permanent Redirect"}
    assert line == f"HTTP/1.1 {status} {reason[status]}"
    assert headers["Location"] == URL


async def test_the_visit_is_the_caller_s_with_its_trace(
    client: Client, store: Store, connect: Connect
) -> None:
    await cached(client, store)
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    wire = await connect(client)
    wire.send(
        get(
            f"/{CODE}?utm_source=mail",
            f"User-Agent: {CHROME}",
            "Referer: https://News.Example.com/item?id=1",
            f"traceparent: 00-{trace}-00f067aa0ba902b7-01",
        )
    )
    status, headers, _ = await wire.response()
    assert status == "HTTP/1.1 302 Found"
    assert headers["X-Trace-Id"] == trace
    await wait_for(visits_stored(store, 2), timeout=5)  # with the GET that cached the link
    visit, row_trace = (await visits(store))[-1]
    assert client.app is not None
    assert visit.code == CODE
    assert visit.trace_id == row_trace == trace
    assert visit.visitor == visitor_hash(client.app[VISITOR_KEY], "127.0.0.1", CHROME)
    assert visit.referrer_host == "news.example.com"
    assert visit.browser == "Chrome"
    assert not visit.is_bot


async def test_pipelined_requests_are_answered_in_their_order(
    client: Client, store: Store, connect: Connect
) -> None:
    await cached(client, store)
    wire = await connect(client)
    # A redirect first (on the wire), then one aiohttp answers, then redirects behind it
    # (aiohttp's, in turn), a 404 and a HEAD.
    wire.send(
        get(f"/{CODE}"),
        get("/healthz"),
        get(f"/{CODE}"),
        get("/nosuchcode"),
        f"HEAD /{CODE} HTTP/1.1\r\nHost: sluice\r\n\r\n".encode(),
        get(f"/{CODE}"),
    )
    statuses = []
    for _ in range(4):
        statuses.append((await wire.response())[0])
    statuses.append((await wire.reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")[0])
    statuses.append((await wire.response())[0])
    assert statuses == [
        "HTTP/1.1 302 Found",
        "HTTP/1.1 200 OK",
        "HTTP/1.1 302 Found",
        "HTTP/1.1 404 Not Found",
        "HTTP/1.1 302 Found",
        "HTTP/1.1 302 Found",
    ]
    await wait_for(visits_stored(store, 4), timeout=5)  # the GETs, with the first one's


async def test_a_client_that_reads_late_gets_every_answer_in_order(
    client: Client, store: Store, connect: Connect
) -> None:
    """Answers on the wire until the socket holds no more (small buffers on both ends):
    the server's writes back up, the heads after that wait for aiohttp's writer (which
    stops reading), so what the server holds for the client stays bounded, and nothing
    is lost or out of order once the client reads."""
    await cached(client, store)
    assert client.app is not None
    recorder = client.app[VISITS]
    wire = await connect(client, receive_buffer=4096)
    wire.send(get(f"/{CODE}"))
    await wire.response()
    ours = wire.writer.get_extra_info("sockname")
    (server_side,) = [
        handler
        for handler in client.server.runner.server.connections
        if handler.transport is not None and handler.transport.get_extra_info("peername") == ours
    ]
    assert server_side.transport is not None
    server_side.transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
    )
    transport = server_side.transport
    _, high_water = transport.get_write_buffer_limits()
    sent, recorded = 0, recorder.recorded

    def send_one() -> None:
        nonlocal sent
        wire.send(get(f"/{CODE}", f"traceparent: 00-{sent + 1:032x}-00f067aa0ba902b7-01"))
        sent += 1

    async def answered_or_backed_up() -> bool:
        return recorder.recorded - recorded == sent or server_side.writing_paused

    while not server_side.writing_paused:  # one head at a time, each answered on the wire
        send_one()
        await wait_for(answered_or_backed_up, timeout=10, interval=0.001)
    server_socket = transport.get_extra_info("socket")

    async def read_by_server() -> bool:  # or no longer read: aiohttp's queue is full
        unread = fcntl.ioctl(server_socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
        return struct.unpack("i", unread)[0] == 0 or not transport.is_reading()

    for _ in range(40):  # one at a time again: these wait for aiohttp's writer
        if not transport.is_reading():
            break
        send_one()
        await wire.writer.drain()
        await wait_for(read_by_server, timeout=10, interval=0.001)
    assert transport.get_write_buffer_size() <= high_water + 4096
    for i in range(sent):
        status, headers, _ = await wire.response()
        assert (status, headers["X-Trace-Id"]) == ("HTTP/1.1 302 Found", f"{i + 1:032x}")
    await wait_for(visits_stored(store, sent + 2), timeout=30)


async def test_heads_pipelined_past_aiohttp_s_queue_are_all_answered(
    client: Client, store: Store, connect: Connect
) -> None:
    """aiohttp parses at most a queue's worth of pipelined heads at a time and keeps the
    rest of the bytes; a client that sent them all at once waits for no further read."""
    await cached(client, store)
    wire = await connect(client)
    n = 1_000
    wire.send(*(get(f"/{CODE}") for _ in range(n)))
    for _ in range(n):
        assert (await wire.response())[0] == "HTTP/1.1 302 Found"
    await wait_for(visits_stored(store, n + 1), timeout=30)


@pytest.mark.parametrize(
    ("head", "answer"),
    [
        (get(f"/{CODE}", "Connection: close"), "HTTP/1.1 302 Found"),
        (get(f"/{CODE}", version="1.0"), "HTTP/1.0 302 Found"),
    ],
    ids=["connection-close", "http-1.0"],
)
async def test_a_request_that_closes_its_connection_is_answered_then_closed(
    client: Client, store: Store, connect: Connect, head: bytes, answer: str
) -> None:
    await cached(client, store)
    wire = await connect(client)
    wire.send(head)
    status, headers, _ = await wire.response()
    assert (status, headers["Location"]) == (answer, URL)
    assert await wire.closed() == b""
    await wait_for(visits_stored(store, 2), timeout=5)


async def test_a_failure_on_the_wire_leaves_the_answer_to_aiohttp(
    client: Client, store: Store, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    await cached(client, store)

    def broken(self: WireRedirects, message: object, remote: str | None) -> bytes:
        raise RuntimeError("a bug on the wire")

    monkeypatch.setattr(WireRedirects, "response", broken)
    wire = await connect(client)
    wire.send(get(f"/{CODE}"))
    status, headers, _ = await wire.response()
    assert (status, headers["Location"]) == ("HTTP/1.1 302 Found", URL)
    await wait_for(visits_stored(store, 2), timeout=5)


@pytest.fixture
async def answered(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config], connect: Connect
) -> Wire:
    """A connection to an API with a keep-alive timeout and a head deadline of 1 s, just
    answered a redirect on the wire."""
    config = make_config(keepalive_timeout_seconds=1, header_timeout_seconds=1)
    client = await aiohttp_client(create_app(config))
    assert client.app is not None
    await cached(client, client.app[STORE])
    wire = await connect(client)
    wire.send(get(f"/{CODE}"))
    assert (await wire.response())[0] == "HTTP/1.1 302 Found"
    return wire


async def test_a_connection_idle_after_a_redirect_closes_at_the_keepalive_timeout(
    answered: Wire,
) -> None:
    for _ in range(2):  # each answer starts the idle time again
        await asyncio.sleep(0.6)  # idle, less than the timeout
        answered.send(get(f"/{CODE}"))
        assert (await answered.response())[0] == "HTTP/1.1 302 Found"
    last = time.monotonic()
    assert await answered.closed() == b""
    assert 0.8 <= time.monotonic() - last <= 3.0


async def test_a_head_that_never_completes_after_a_redirect_is_cut_at_its_deadline(
    answered: Wire,
) -> None:
    answered.send(b"GET /healthz HTTP/1.1\r\nHost: s")  # and nothing more
    started = time.monotonic()
    assert await answered.closed() == b""
    assert 0.8 <= time.monotonic() - started <= 3.0
