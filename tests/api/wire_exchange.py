"""Request streams sent to two sites of one app over raw sockets, from a worker thread
while the test's event loop serves them, and what each wrote back: the harness of
tests/api/test_wire_differential.py.

The client waits, between the steps of a stream, for the server to be where the step
expects it, asking on the loop (test code may read the connection handler's state;
sluice's own code reads it only as ``sluice.http.aiohttp_compat`` allows): the first
chunk once the handler waits for a head (or every first head would go to aiohttp, the
wire path answering only while aiohttp waits); each later chunk once the server has
read every byte before it (``count_reads``: so the chunks arrive in reads of their
own, whatever the timing, and both sites see the same reads); and the sentinel once
the server has read the stream and waits for the next head, or has closed the
connection (then nothing more is sent).
"""

from __future__ import annotations

import asyncio
import re
import selectors
import socket
import time
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from sluice.builtin.links.visits import VisitRecorder
from sluice.http.connections import GuardedRequestHandler

# The last request of every stream; answered only on a connection still open after the
# stream, and it closes it.
_SENTINEL_TRACE = b"5e471e1000000000000000000000f1a9"  # continued from its traceparent
SENTINEL = (
    b"GET /healthz HTTP/1.1\r\nHost: sentinel\r\n"
    b"traceparent: 00-" + _SENTINEL_TRACE + b"-00f067aa0ba902b7-01\r\n"
    b"Connection: close\r\n\r\n"
)
_SENTINEL_ANSWERED = b"X-Trace-Id: " + _SENTINEL_TRACE + b"\r\n"


@dataclass(frozen=True)
class Answer:
    """What one site made of one stream."""

    data: bytes  # everything written back, Date and made-up trace ids blanked
    open_after: bool  # the sentinel after the stream was answered
    # "closed" (with a FIN or a reset: whether the server's close finds bytes of the
    # client's still unread in its socket, a reset, is a race of when they arrive, on
    # either site), or "open" (nothing more came within the patience given).
    end: str
    visits: int


def normalized(raw: bytes, sent: bytes) -> bytes:
    """``raw`` with what differs from one answer to the next blanked: ``Date`` values, and
    ``X-Trace-Id`` values the server made up (not one the caller sent in ``sent``)."""
    traces = set(re.findall(rb"X-Trace-Id: ([^\r\n]*)\r\n", raw))
    made_up = {trace for trace in traces if trace not in sent + SENTINEL}
    data = re.sub(rb"Date: [^\r\n]*\r\n", b"Date: <date>\r\n", raw)
    for trace in sorted(made_up, key=len, reverse=True):
        data = data.replace(b": " + trace + b"\r\n", b": <trace id>\r\n")
    return data


class Sites:
    """Two sites of one app (``on`` and ``off``: their ports) served by ``server`` on
    ``loop``, and exchanges of streams with them; call from a thread other than the loop's."""

    def __init__(
        self,
        on: int,
        off: int,
        *,
        server: web.Server,
        recorder: VisitRecorder,
        reads: dict[Any, int],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.on, self.off = on, off
        self._server, self._recorder, self._loop = server, recorder, loop
        self._reads = reads

    @property
    def recorded(self) -> int:
        """Visits recorded by the app so far, by either site."""
        return self._recorder.recorded

    def both(self, chunks: list[bytes], **options: Any) -> tuple[Answer, Answer]:
        """The answers of ``on`` and ``off`` to the same stream (``exchange``)."""
        on = self.exchange(self.on, chunks, **options)
        return on, self.exchange(self.off, chunks, **options)

    def exchange(
        self,
        port: int,
        chunks: list[bytes],
        *,
        stall: bool = False,
        receive_buffer: int | None = None,
        patience: float = 5.0,
    ) -> Answer:
        """``chunks`` sent on a new connection to ``port``, the first once the server waits
        for a head, each after the server read the one before; then, once the server is
        done with them (waiting for the next head, or closed), the sentinel; and
        everything the server writes until it closes (or nothing more comes for
        ``patience`` seconds). ``stall``: the client reads nothing until its writes
        block (or everything is sent)."""
        before = self._recorder.recorded
        with socket.socket() as sock:
            if receive_buffer is not None:  # before connecting: the window it offers
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            sock.connect(("127.0.0.1", port))
            sock.setblocking(False)
            self._reads[sock.getsockname()] = 0  # a port used before starts again
            raw, end = _Talk(self, sock, [*chunks, SENTINEL], stall, patience).run()
        visits = self._recorder.recorded - before
        return Answer(normalized(raw, b"".join(chunks)), _SENTINEL_ANSWERED in raw, end, visits)

    def server_side(self, client: tuple[str, int], sent: int) -> str:
        """Where the server's side of the connection from ``client`` is, the client having
        sent ``sent`` bytes: "gone" (closed), "busy" (bytes still to read, or a request
        in hand), "read" (every byte read, or no longer reading) or "idle" (read, and
        waiting for a head with none queued)."""

        async def look() -> str:
            for handler in self._server.connections:
                transport = handler.transport
                if transport is None or transport.get_extra_info("peername") != client:
                    continue
                assert isinstance(handler, GuardedRequestHandler)
                if self._reads.get(client, 0) < sent and transport.is_reading():
                    return "busy"
                if handler._waiting_for_head() and not handler._messages:
                    return "idle"
                return "read"
            return "gone"

        return asyncio.run_coroutine_threadsafe(look(), self._loop).result(5)


def count_reads(monkeypatch: pytest.MonkeyPatch) -> dict[Any, int]:
    """The bytes each server-side connection has read, by its peer's address: what
    ``Sites`` waits on."""
    reads: dict[Any, int] = {}
    received = GuardedRequestHandler.data_received

    def counted(handler: GuardedRequestHandler, data: bytes) -> None:
        if handler.transport is not None:
            peer = handler.transport.get_extra_info("peername")
            reads[peer] = reads.get(peer, 0) + len(data)
        received(handler, data)

    monkeypatch.setattr(GuardedRequestHandler, "data_received", counted)
    return reads


class _Talk:
    """One exchange (``Sites.exchange``): the client's side, a non-blocking socket."""

    def __init__(
        self, sites: Sites, sock: socket.socket, steps: list[bytes], stall: bool, patience: float
    ) -> None:
        self.sites, self.sock, self.steps = sites, sock, steps
        self.client = sock.getsockname()
        self.patience = patience
        self.reading = not stall
        self.sent = 0  # steps handed to ``out``
        self.written = 0  # bytes written
        self.out = b""
        self.received = bytearray()
        self.deadline = time.monotonic() + patience

    def run(self) -> tuple[bytes, str]:
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
            while True:
                waiting = not self.out and self.sent < len(self.steps) and not self._next()
                if not self.out and self.sent == len(self.steps):
                    self.reading = True
                    selector.modify(self.sock, selectors.EVENT_READ)
                timeout = 0.001 if waiting else max(0.0, self.deadline - time.monotonic())
                events = selector.select(timeout)
                if not events and not waiting and time.monotonic() >= self.deadline:
                    return bytes(self.received), "open"
                for _, mask in events:
                    if mask & selectors.EVENT_WRITE and self.out:
                        self._write()
                    if mask & selectors.EVENT_READ and self.reading:
                        end = self._read()
                        if end is not None:
                            return bytes(self.received), end

    def _next(self) -> bool:
        """The next step taken into ``out`` if the server is where it should be for it:
        waiting for the first head; every byte of a chunk read before the next; done
        with the stream before the sentinel (or ``patience`` gone: a body it waits for).
        Nothing more once it closed the connection."""
        first, sentinel = self.sent == 0, self.sent == len(self.steps) - 1
        state = self.sites.server_side(self.client, self.written)
        if state == "gone" and not first:
            self.sent = len(self.steps)
            return True
        ready = state == "idle" or (state == "read" and not (first or sentinel))
        if not ready and not (sentinel and time.monotonic() >= self.deadline):
            return False
        self.out, self.sent = self.steps[self.sent], self.sent + 1
        self.deadline = time.monotonic() + self.patience
        return True

    def _write(self) -> None:
        try:
            written = self.sock.send(self.out)
        except BlockingIOError:
            written = 0
        except (BrokenPipeError, ConnectionResetError):  # closed: nothing more goes out
            self.out, self.sent = b"", len(self.steps)
            return
        if written < len(self.out):
            self.reading = True  # a client that stops reading starts when its writes block
        self.out = self.out[written:]
        self.written += written
        self.deadline = time.monotonic() + self.patience

    def _read(self) -> str | None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return None
        except ConnectionError:
            return "closed"
        if not data:
            return "closed"
        self.received += data
        self.deadline = time.monotonic() + self.patience
        return None


def difference(on: Answer, off: Answer) -> str:
    """What differs between the answers of the two sites, to read ("" when nothing)."""
    found = [
        f"{field}: wire {getattr(on, field)!r}, aiohttp {getattr(off, field)!r}"
        for field in ("open_after", "end", "visits")
        if getattr(on, field) != getattr(off, field)
    ]
    if on.data != off.data:
        pairs = zip(on.data, off.data, strict=False)
        at = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(on.data), len(off.data)))
        start = max(0, at - 120)
        found.append(
            f"bytes from {at} (of {len(on.data)} and {len(off.data)}):\n"
            f"    wire:    {on.data[start : at + 240]!r}\n"
            f"    aiohttp: {off.data[start : at + 240]!r}"
        )
    return "\n  ".join(found)
