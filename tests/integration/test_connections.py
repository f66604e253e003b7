"""Slow clients against a real ``sluice api`` (SPEC 15), over raw sockets: a connection
that sends no complete head in time, stalls or trickles its body, idles past the
keep-alive timeout, or comes beyond the connection cap is closed; everyone else is
answered meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import pytest

from sluice.app.testing import Child, wait_answering
from sluice.embedded.redis_server import free_port

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
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))  # fmt: skip
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


Connect = Callable[[int], Awaitable[Connection]]
Start = Callable[..., Awaitable[int]]


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """Open raw connections to a port; all closed at the end."""
    opened: list[Connection] = []

    async def open_one(port: int) -> Connection:
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
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


async def healthz(port: int) -> float:
    """A normal request on a connection of its own: the seconds its answer took."""
    started = time.monotonic()
    async with aiohttp.ClientSession() as http, http.get(f"{url(port)}/healthz") as response:
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
    assert after < 1.0
    await held.pop().close()
    await asyncio.sleep(0.3)
    assert await healthz(port) < 0.5  # a slot is free again
