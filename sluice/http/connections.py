"""Where the API listens, with deadlines and caps on connections (docs/guides/security.md,
"Limits on abuse" and "Connection slots").

aiohttp closes a connection that sits idle between requests after its
keep-alive timeout, but it has no deadline for a request head: a client that
opens a connection and sends nothing, or a request line and then a header byte
now and then, holds the connection and its file descriptor for ever (300 of
them exhausted a replica). So each connection here has:

- a **head deadline** (``SLUICE_HEADER_TIMEOUT_SECONDS``): a complete request
  head must arrive within it, counted from the connection's start and, between
  keep-alive requests, from the first byte of the next head; otherwise the
  connection is closed without an answer;
- the **keep-alive timeout** (``SLUICE_KEEPALIVE_TIMEOUT_SECONDS``): idle
  between requests (or before the first byte of the first) that long, it is
  closed, which is aiohttp's own timer;
- a **body deadline** (``SLUICE_BODY_TIMEOUT_SECONDS``), which the request
  middleware keeps as it reads the body (``sluice.http.bodies``);
- a **write timeout** (``SLUICE_WRITE_TIMEOUT_SECONDS``): an answer the client does
  not read fills the kernel's buffers, then the transport's past its high-water mark,
  which pauses writing (``pause_writing``); paused that long without a
  ``resume_writing``, the connection is aborted, its unsent bytes dropped. Nothing else
  closes it: aiohttp's handler waits for the drain for ever, and the keep-alive and
  head timers do not run while a request is answered. The timer is armed only when
  writing pauses, so an answer read as it comes costs nothing. (An answer sent with
  ``sendfile`` bypasses the transport and would not be seen: sluice sends none.)

And each process holds at most ``SLUICE_MAX_CONNECTIONS`` connections, and one client
address at most ``SLUICE_CONNECTIONS_PER_ADDRESS`` of them (``sluice.http.client_slots``):
one more is accepted, answered ``503`` with ``Retry-After: 1`` and ``Connection: close``
at once, and closed, without reading from it. Refusing fast beats leaving it in
the listen backlog: the descriptor comes straight back, and a client learns at
once to try again (another replica, or this one a second later) instead of
waiting on a connection nobody will read.

The head deadline needs to know when aiohttp's request handler is waiting for a
head, which aiohttp does not expose: ``GuardedRequestHandler`` reads two of its
attributes (``_waiter``, set while it waits for the next request, and
``_request_count``, the heads parsed so far). tests/integration/test_connections.py
holds the behaviour, so an aiohttp release that changes them fails there.

Redirects answered on the wire (``sluice.http.redirect_wire``) read more of them: the
parser (``_parser``, wrapped to see each feed's heads first, and its
``message_consumed`` and the handler's ``_max_msg_queue_size`` since aiohttp 3.14.1),
the queue of parsed heads (``_messages``), whether writing is paused (``_paused``) and
the keep-alive timer's fields, which ``answer_first`` moves on as aiohttp's ``start()``
does after each answer. tests/api/test_redirect_wire.py holds that behaviour, and
tests/api/test_wire_differential.py holds its answers to hostile input to aiohttp's.

Which aiohttp this runs on is asked once, as ``listen`` builds the site
(``sluice.http.aiohttp_compat``): a version or a handler it does not know turns the
wire off (``wire=None``: every redirect through the request-level fast path), and the
head deadline too if its two attributes are gone (``head_deadline=False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import struct
from collections.abc import Sequence
from typing import Any

import structlog
from aiohttp import web
from aiohttp.streams import EMPTY_PAYLOAD

from sluice.config import Config
from sluice.http.client_slots import ConnectionLimits, slot_key
from sluice.http.redirect_wire import WireRedirects
from sluice.telemetry.prometheus import WRITE_TIMEOUTS

log = structlog.get_logger(__name__)

# Descriptors a process needs besides its client connections: database, Redis, logs, files.
_SPARE_FILES = 256
# SO_LINGER on, 0 seconds: close() resets the connection and drops what the kernel holds
# unsent, where a plain close() would keep it (megabytes) until the client reads it.
_RESET = struct.pack("ii", 1, 0)


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's request handler with the head deadline, the connection cap and, given
    ``wire``, redirects answered as their heads are parsed (``sluice.http.redirect_wire``)."""

    __slots__ = (
        "_counted",
        "_head_deadline",
        "_head_timer",
        "_heads_at_arming",
        "_limits",
        "_remote",
        "_slot",
        "_wire",
        "_write_timer",
    )

    def __init__(
        self,
        manager: web.Server,
        limits: ConnectionLimits,
        *,
        wire: WireRedirects | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_deadline = 0.0
        self._heads_at_arming = -1
        self._counted = False
        self._slot: str | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._wire = wire
        self._remote: str | None = None
        if wire is not None:
            self._parser = _AnsweringParser(self._parser, self)  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        limits = self._limits
        assert isinstance(transport, asyncio.Transport)
        if limits.open >= limits.max_connections:
            self._refuse(transport, limits.refusal("process"))
            return
        peer = transport.get_extra_info("peername")
        remote = str(peer[0]) if isinstance(peer, (list, tuple)) else peer  # as aiohttp
        if isinstance(peer, (list, tuple)):
            slot = slot_key(remote)
            if not limits.slots.take(slot):
                self._refuse(transport, limits.refusal("address", slot))
                return
            self._slot = slot
        limits.open += 1
        self._counted = True
        super().connection_made(transport)
        self._remote = remote
        if limits.head_deadline:
            self._arm_head_deadline()

    @staticmethod
    def _refuse(transport: asyncio.Transport, answer: bytes) -> None:
        transport.write(answer)
        transport.close()  # after the answer is written; aiohttp never sees it

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._counted:
            self._counted = False
            self._limits.open -= 1
            if self._slot is not None:
                self._limits.slots.give_back(self._slot)
        for timer in (self._head_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._write_timer = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        # The transport holds more than its high-water mark unsent: the client reads slower
        # than it is answered, or not at all. Armed here only, so an answer read as it is
        # written (every redirect) costs no timer.
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self._loop.call_later(
                self._limits.write_timeout, self._write_overdue
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_overdue(self) -> None:
        self._write_timer = None
        transport = self.transport
        if not self._paused or transport is None:
            return
        log.debug("connection closed: its answer was not read in time", peer=self._remote)
        WRITE_TIMEOUTS.inc()
        # abort, not close: close would wait for the unsent bytes the client does not read.
        with contextlib.suppress(OSError, AttributeError):
            transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, _RESET
            )
        transport.abort()

    def data_received(self, data: bytes) -> None:
        # The first bytes of a head after an earlier request: its deadline starts now.
        # (A connection's first head is timed from the connection's start.)
        if (
            data
            and self._limits.head_deadline
            and self._waiting_for_head()
            and self._heads_at_arming != self._request_count
        ):
            self._arm_head_deadline()
        super().data_received(data)

    def answer_first(self, messages: Sequence[Any]) -> Sequence[Any]:
        """``messages`` (what the parser made of the bytes just received) minus the
        leading ones answered here and now, on the wire. Only while aiohttp waits for a
        head with none queued (so answers keep their requests' order) and the client
        reads what it is sent (a client that does not is left to aiohttp's writer,
        which waits for it)."""
        waiter, transport, wire = self._waiter, self.transport, self._wire
        if self._messages or waiter is None or waiter.done() or transport is None:
            return messages
        assert wire is not None
        answered = 0
        for message, payload in messages:
            if self._paused or payload is not EMPTY_PAYLOAD:
                break
            try:
                response = wire.response(message, self._remote)
            except Exception:  # a bug here must not cost the connection: aiohttp answers
                log.exception("redirect on the wire failed, answering through aiohttp")
                break
            if response is None:
                break
            transport.write(response)
            answered += 1
        if not answered:
            return messages
        self._request_count += answered
        # aiohttp's start() after each request: the keep-alive timer runs again from now.
        if self._keepalive and not self._close and not self._force_close:
            close_time = self._loop.time() + self._keepalive_timeout
            self._next_keepalive_close_time = close_time
            if self._keepalive_handle is None:
                self._keepalive_handle = self._loop.call_at(close_time, self._process_keepalive)
        return messages[answered:]

    def _waiting_for_head(self) -> bool:
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _arm_head_deadline(self) -> None:
        # One timer at a time, moved forward when it fires early (as aiohttp's keep-alive
        # timer is): a kept-alive connection re-arms for every head.
        self._heads_at_arming = self._request_count
        self._head_deadline = self._loop.time() + self._limits.header_timeout
        if self._head_timer is None:
            self._head_timer = self._loop.call_at(self._head_deadline, self._head_overdue)

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self._loop.time() < self._head_deadline:
            self._head_timer = self._loop.call_at(self._head_deadline, self._head_overdue)
            return
        # No head parsed since the deadline started, and none being handled: close.
        if self._request_count == self._heads_at_arming and self._waiting_for_head():
            log.debug("connection closed: no complete request head in time", peer=self.peername)
            self.force_close()


class _AnsweringParser:
    """aiohttp's request parser, whose parsed heads go to ``answer_first`` before
    aiohttp sees them; everything else is the parser's own."""

    __slots__ = ("_consumed", "_handler", "_limit", "_parser")

    def __init__(self, parser: Any, handler: GuardedRequestHandler) -> None:
        self._parser = parser
        self._handler = handler
        # Since aiohttp 3.14 the parser counts the heads it handed out and aiohttp has not
        # handled yet, and stops at a limit with the rest of the bytes kept: aiohttp
        # parses them once its queue has drained. Heads answered here must be counted
        # off; and a feed that reached the limit goes to aiohttp whole, or the bytes
        # kept would wait for the next read (none comes from a client that pipelined
        # everything already).
        self._consumed = getattr(parser, "message_consumed", None)
        self._limit = getattr(handler, "_max_msg_queue_size", 0) if self._consumed else 0

    def feed_data(self, data: bytes) -> Any:
        messages, upgraded, tail = self._parser.feed_data(data)
        if messages and not upgraded and not (self._limit and len(messages) >= self._limit):
            left = self._handler.answer_first(messages)
            if self._consumed is not None:
                for _ in range(len(messages) - len(left)):
                    self._consumed()
            messages = left
        return messages, upgraded, tail

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


class GuardedSite(web.BaseSite):
    """A TCP site (``web.TCPSite``) whose connections are ``GuardedRequestHandler``\\ s;
    ``wire``: the redirects they answer as soon as a head is parsed; ``head_deadline``:
    whether they keep one (``sluice.http.aiohttp_compat`` says whether they can)."""

    __slots__ = ("_config", "_host", "_port", "_reuse_port", "_wire", "limits")

    def __init__(
        self,
        runner: web.BaseRunner,
        config: Config,
        *,
        reuse_port: bool = False,
        wire: WireRedirects | None = None,
        head_deadline: bool = True,
    ) -> None:
        super().__init__(runner)
        self._reuse_port = reuse_port
        self._wire = wire
        self._host = config.host
        self._port = config.port
        self._config = config
        self.limits = ConnectionLimits(config, head_deadline=head_deadline)

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The port listened on (the one the system chose, for port 0)."""
        if self._server is not None and (sockets := self._server.sockets):  # type: ignore[attr-defined]
            return int(sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None, "runner.setup() first"
        loop = asyncio.get_running_loop()
        raise_file_limit(self._config.max_connections + _SPARE_FILES)
        limits, keepalive, wire = self.limits, self._config.keepalive_timeout_seconds, self._wire

        def connection() -> GuardedRequestHandler:
            # access_log=None: the request middleware writes the one line per request.
            return GuardedRequestHandler(
                server, limits, wire=wire, loop=loop, keepalive_timeout=keepalive, access_log=None
            )

        self._server = await loop.create_server(
            connection, self._host, self._port, reuse_address=True, reuse_port=self._reuse_port
        )


def raise_file_limit(wanted: int) -> None:
    """Raise this process's soft limit on open files to ``wanted`` (at most the hard
    limit), so the connection cap is what refuses a client, not ``EMFILE`` in accept."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "open file limit below the connection cap and what the process needs besides",
            limit=soft,
            wanted=wanted,
        )
