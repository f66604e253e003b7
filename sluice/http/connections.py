"""Where the API listens, with deadlines and a cap on connections (SPEC 15).

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
  middleware keeps as it reads the body (``sluice.http.bodies``).

And each process holds at most ``SLUICE_MAX_CONNECTIONS`` connections: one more
is accepted, answered ``503`` with ``Retry-After: 1`` and ``Connection: close``
at once, and closed, without reading from it. Refusing fast beats leaving it in
the listen backlog: the descriptor comes straight back, and a client learns at
once to try again (another replica, or this one a second later) instead of
waiting on a connection nobody will read.

The head deadline needs to know when aiohttp's request handler is waiting for a
head, which aiohttp does not expose: ``GuardedRequestHandler`` reads two of its
attributes (``_waiter``, set while it waits for the next request, and
``_request_count``, the heads parsed so far). tests/integration/test_connections.py
holds the behaviour, so an aiohttp release that changes them fails there.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from typing import Any

import msgspec
import structlog
from aiohttp import web

from sluice.config import Config
from sluice.http.schemas import Problem

log = structlog.get_logger(__name__)

# Descriptors a process needs besides its client connections: database, Redis, logs, files.
_SPARE_FILES = 256
_REFUSED_LOG_EVERY = 10.0  # seconds: one warning per stretch of refusals, not one per connection


def _refusal() -> bytes:
    body = msgspec.json.encode(
        Problem(
            type="about:blank",
            title="Service Unavailable",
            status=503,
            detail="this server holds as many connections as it takes; try again",
        )
    )
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/problem+json\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


_REFUSAL = _refusal()


class ConnectionLimits:
    """What every connection of one listening site shares: the deadlines and the count."""

    def __init__(self, config: Config) -> None:
        self.header_timeout = config.header_timeout_seconds
        self.max_connections = config.max_connections
        self.open = 0
        self.refused = 0
        self._refused_logged = 0
        self._last_log = -_REFUSED_LOG_EVERY

    def note_refused(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._last_log >= _REFUSED_LOG_EVERY:
            self._last_log = now
            log.warning(
                "connection cap reached: new connections answered 503 and closed",
                max_connections=self.max_connections,
                refused=self.refused - self._refused_logged,
            )
            self._refused_logged = self.refused


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's request handler with the head deadline and the connection cap."""

    __slots__ = ("_counted", "_head_timer", "_heads_at_arming", "_limits")

    def __init__(self, manager: web.Server, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._head_timer: asyncio.TimerHandle | None = None
        self._heads_at_arming = -1
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        limits = self._limits
        if limits.open >= limits.max_connections:
            limits.note_refused()
            assert isinstance(transport, asyncio.Transport)
            transport.write(_REFUSAL)
            transport.close()  # after the answer is written; aiohttp never sees it
            return
        limits.open += 1
        self._counted = True
        super().connection_made(transport)
        self._arm_head_deadline()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._counted:
            self._counted = False
            self._limits.open -= 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # The first bytes of a head after an earlier request: its deadline starts now.
        # (A connection's first head is timed from the connection's start.)
        if data and self._waiting_for_head() and self._heads_at_arming != self._request_count:
            self._arm_head_deadline()
        super().data_received(data)

    def _waiting_for_head(self) -> bool:
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _arm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._heads_at_arming = self._request_count
        self._head_timer = self._loop.call_later(self._limits.header_timeout, self._head_overdue)

    def _head_overdue(self) -> None:
        self._head_timer = None
        # No head parsed since the deadline started, and none being handled: close.
        if self._request_count == self._heads_at_arming and self._waiting_for_head():
            log.debug("connection closed: no complete request head in time", peer=self.peername)
            self.force_close()


class GuardedSite(web.BaseSite):
    """A TCP site (``web.TCPSite``) whose connections are ``GuardedRequestHandler``\\ s."""

    __slots__ = ("_config", "_host", "_port", "_reuse_port", "limits")

    def __init__(self, runner: web.BaseRunner, config: Config, *, reuse_port: bool = False) -> None:
        super().__init__(runner)
        self._reuse_port = reuse_port
        self._host = config.host
        self._port = config.port
        self._config = config
        self.limits = ConnectionLimits(config)

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
        limits, keepalive = self.limits, self._config.keepalive_timeout_seconds

        def connection() -> GuardedRequestHandler:
            # access_log=None: the request middleware writes the one line per request.
            return GuardedRequestHandler(
                server, limits, loop=loop, keepalive_timeout=keepalive, access_log=None
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
