"""Slow clients against a real ``sluice api`` (docs/guides/security.md, "Limits on
abuse" and "Connection slots"), over raw sockets: a connection that sends no complete
head in time, stalls or trickles its body, idles past the keep-alive timeout, does not
read its answers, or comes beyond the connection cap or its address's share of it is
closed; everyone else is answered meanwhile. Two loopback addresses (127.0.0.3 and
127.0.0.4, bound as the client side) play two clients."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import pytest

from sluice.app.testing import Child, wait_answering, wait_for
from sluice.embedded.redis_server import free_port
from sluice.store import Store
from tests.link_helpers import add_link

# Connection handling does not touch the store: one backend is enough.
pytestmark = pytest.mark.stores("sqlite")

HEAD = b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n"


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    opened: float

    async def closed(self, limit: float = 15.0) -> tuple[bytes, float]:
        """Everything the server sends until it closes, and when that was (seconds since
        the connection opened)."""
        data = b""
        async with asyncio.timeout(limit):
            with contextlib.suppress(ConnectionResetError):
                while chunk := await self.reader.read(65536):
                    data += chunk
        return data, time.monotonic() - self.opened

    async def response(self) -> bytes:
        """One response of a kept-alive connection (head and its Content-Length body)."""
        async with asyncio.timeout(10):
            head = await self.reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            return head + await self.reader.readexactly(length)

    async def trickle(self, data: bytes, every: float = 0.2) -> None:
        """Send ``data`` a byte at a time, until it is sent or the server hangs up."""
        with contextlib.suppress(ConnectionError):
            for byte in data:
                self.writer.write(bytes([byte]))
                await self.writer.drain()
                await asyncio.sleep(every)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


Connect = Callable[..., Awaitable[Connection]]
Start = Callable[..., Awaitable[int]]


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """Open raw connections to a port; all closed at the end."""
    opened: list[Connection] = []

    async def open_one(port: int, source: str | None = None) -> Connection:
        """``source``: the client's own address (another loopback one is another client)."""
        started = time.monotonic()
        local = None if source is None else (source, 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=local)
        opened.append(Connection(reader, writer, started))
        return opened[-1]

    yield open_one
    for connection in opened:
        connection.writer.close()
        with contextlib.suppress(ConnectionError):
            await connection.writer.wait_closed()


@pytest.fixture
def api(spawn: Callable[..., Child]) -> Start:
    """Start ``sluice api`` with these SLUICE_* settings; its port once it answers."""

    async def start(**settings: str) -> int:
        port = free_port()
        spawn(
            "api", SLUICE_PORT=str(port), **{f"SLUICE_{k.upper()}": v for k, v in settings.items()}
        )
        await wait_answering([url(port)])
        return port

    return start


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


async def healthz(port: int, source: str | None = None) -> float:
    """A normal request on a connection of its own (from ``source``, a local address):
    the seconds its answer took."""
    started = time.monotonic()
    connector = aiohttp.TCPConnector(local_addr=None if source is None else (source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.get(f"{url(port)}/healthz") as response,
    ):
        assert response.status == 200
    return time.monotonic() - started


async def test_no_complete_head_in_time_closes_the_connection_while_others_are_answered(
    api: Start,
    connect: Connect,
) -> None:
    port = await api(header_timeout_seconds="1", keepalive_timeout_seconds="30")
    idle = await connect(port)
    partial = await connect(port)
    partial.writer.write(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n")
    slow_header = asyncio.create_task(partial.trickle(b"X-Slow: " + b"a" * 200))
    assert await healthz(port) < 0.5  # the slow ones hold nobody up
    for held in (idle, partial):
        data, after = await held.closed()
        assert data == b""  # closed without an answer: there is no request to answer
        assert 0.8 <= after <= 3.0, after
    slow_header.cancel()
    assert await healthz(port) < 0.5


@pytest.mark.parametrize("trickled", [True, False], ids=["trickled", "stalled"])
async def test_a_body_that_does_not_arrive_in_time_is_cut_with_408(
    api: Start, connect: Connect, trickled: bool
) -> None:
    port = await api(body_timeout_seconds="1", header_timeout_seconds="10")
    slow = await connect(port)
    body = b'{"viewer": "' + b"v" * 80 + b'"}'
    slow.writer.write(
        b"POST /v1/articles/slow/views HTTP/1.1\r\nHost: sluice\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    head_sent = time.monotonic()
    if trickled:
        sending = asyncio.create_task(slow.trickle(body, every=0.1))
    else:
        slow.writer.write(body[:20])  # and then nothing more
    assert await healthz(port) < 0.5
    data, _ = await slow.closed()
    waited = time.monotonic() - head_sent
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"Connection: close" in data and b"application/problem+json" in data
    assert 0.8 <= waited <= 3.0, waited
    if trickled:
        sending.cancel()
    async with aiohttp.ClientSession() as http, http.get(f"{url(port)}/v1/articles/slow") as answer:
        assert (await answer.json())["views"] == 0  # nothing was half-done


async def test_a_kept_alive_connection_idles_up_to_the_keepalive_timeout(
    api: Start,
    connect: Connect,
) -> None:
    port = await api(keepalive_timeout_seconds="1", header_timeout_seconds="10")
    kept = await connect(port)
    kept.writer.write(HEAD)
    assert (await kept.response()).startswith(b"HTTP/1.1 200 ")
    answered = time.monotonic()
    data, _ = await kept.closed()
    assert data == b""
    assert 0.8 <= time.monotonic() - answered <= 3.0


async def test_the_next_head_on_a_kept_alive_connection_gets_its_own_deadline(
    api: Start,
    connect: Connect,
) -> None:
    port = await api(header_timeout_seconds="1", keepalive_timeout_seconds="10")
    kept = await connect(port)
    kept.writer.write(HEAD)
    assert (await kept.response()).startswith(b"HTTP/1.1 200 ")
    # Idle between requests is the keep-alive timeout's business, not the head deadline's.
    await asyncio.sleep(1.6)
    kept.writer.write(HEAD)
    assert (await kept.response()).startswith(b"HTTP/1.1 200 ")
    kept.writer.write(b"GET /healthz HTTP/1.1\r\n")  # a head that never completes
    started = time.monotonic()
    data, _ = await kept.closed()
    assert data == b""
    assert 0.8 <= time.monotonic() - started <= 3.0  # the head deadline, not keep-alive's 10 s


async def test_connections_beyond_the_cap_are_answered_503_and_closed_at_once(
    api: Start,
    connect: Connect,
) -> None:
    port = await api(max_connections="3", header_timeout_seconds="30")
    await asyncio.sleep(0.3)  # the readiness check's connection is gone
    held = [await connect(port) for _ in range(3)]
    await asyncio.sleep(0.2)
    extra = await connect(port)
    data, after = await extra.closed()
    assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), data
    assert b"Retry-After: 1\r\n" in data and b"Connection: close\r\n" in data
    assert b"X-Content-Type-Options: nosniff\r\n" in data
    assert after < 1.0
    await held.pop().close()
    await asyncio.sleep(0.3)
    assert await healthz(port) < 0.5  # a slot is free again


async def test_one_address_at_its_share_of_slots_leaves_the_others_theirs(
    api: Start, connect: Connect, store: Store
) -> None:
    await add_link(store, "slots1", "https://example.org/slots")
    port = await api(
        max_connections="10",
        connections_per_address="4",
        header_timeout_seconds="30",
        admin_token=ADMIN_TOKEN,
    )
    greedy, other = "127.0.0.3", "127.0.0.4"
    # As many connections as the whole process takes, idle or with half a head.
    held = [await connect(port, greedy) for _ in range(10)]
    for half_sent in held[:2]:
        half_sent.writer.write(b"GET /healthz HTTP/1.1\r\nHost: slu")
        await half_sent.writer.drain()
    # Another address is served meanwhile: its health check and a redirect.
    assert await healthz(port, other) < 1.0
    connector = aiohttp.TCPConnector(local_addr=(other, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.get(f"{url(port)}/slots1", allow_redirects=False) as redirect:
            location = redirect.headers["Location"]
            assert (redirect.status, location) == (302, "https://example.org/slots")
        # The greedy address got its four; each one beyond them was refused at once.
        for extra in held[4:]:
            data, after = await extra.closed()
            assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), data
            assert b"Retry-After: 1\r\n" in data and b"Connection: close\r\n" in data
            assert b"X-Content-Type-Options: nosniff\r\n" in data
            assert after < 1.0
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with http.get(f"{url(port)}/metrics", headers=admin) as metrics:
            assert 'sluice_connections_refused_total{cap="address"} 6.0' in await metrics.text()
    for kept in held[:4]:
        assert not kept.reader.at_eof()
    # A connection of the greedy address that ends gives its slot back.
    await held[3].close()

    async def served_again() -> bool:
        with contextlib.suppress(AssertionError, aiohttp.ClientError):
            return await healthz(port, greedy) < 1.0
        return False

    await wait_for(served_again, timeout=10)


ADMIN_TOKEN = "connections-admin-token-0123456789abcdef"


def tcp_state(sock: socket.socket) -> int:
    """The kernel's TCP state of ``sock`` (1: established; 7 closed, 8 close-wait)."""
    return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0])


@pytest.mark.parametrize("answers", ["docs-bundle", "redirects"])
async def test_a_client_that_does_not_read_its_answers_is_closed_after_the_write_timeout(
    api: Start, store: Store, answers: str
) -> None:
    await add_link(store, "unread", "https://example.org/" + "u" * 1500)
    port = await api(
        write_timeout_seconds="1", keepalive_timeout_seconds="60", header_timeout_seconds="60"
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # before connect: the window
    sock.setblocking(False)
    if answers == "docs-bundle":  # 1.8 MB each, three times over
        requests = b"GET /docs/assets/swagger-ui-bundle.js HTTP/1.1\r\nHost: sluice\r\n\r\n" * 3
    else:  # 1.6 kB each, answered on the wire until writing pauses, then by aiohttp
        requests = b"GET /unread HTTP/1.1\r\nHost: sluice\r\n\r\n" * 5000
    loop = asyncio.get_running_loop()
    with sock:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        sending = asyncio.create_task(loop.sock_sendall(sock, requests))
        started = time.monotonic()

        async def closed_by_the_server() -> bool:
            return tcp_state(sock) != 1

        try:
            # Writing pauses once the kernel's buffers are full; then one write timeout.
            await wait_for(closed_by_the_server, timeout=10)
        finally:
            sending.cancel()
            with contextlib.suppress(BaseException):
                await sending
        assert time.monotonic() - started < 10
    assert await healthz(port) < 1.0  # everyone else is served as before
