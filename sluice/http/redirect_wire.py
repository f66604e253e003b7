"""The redirect written on the wire: ``GET /{code}`` answered as soon as its head is parsed, before
aiohttp makes a request, a task and a response of it (docs/benchmarks.md, docs/design/redirects.md).

A bare aiohttp handler spends most of its time per request in aiohttp's own machinery:
the request object, a task per request, the stream writer, the response and its
``prepare``. Its parser (llhttp, in C) and the socket calls are the cheap part (a
protocol that writes a ready 302 after that parser serves 2.8 times the requests of the
bare handler on the reference machine: bench/README.md). So the connection handler
(``sluice.http.connections.GuardedRequestHandler``) hands each parsed head to
``WireRedirects.response`` first, and a redirect that the fast path (``fast_redirect``)
answers (a cached, live, plain link; the same choice, visit and tally as there) is
written to the transport at once, as the bytes aiohttp would have written for it:
the status line, ``Location``, ``Cache-Control``, ``X-Trace-Id``, ``Content-Length:
0``, ``Date`` and ``Server``.

Only a head that can be answered out of aiohttp's sight is: ``GET`` over HTTP/1.1,
kept alive, no body, no upgrade, an origin-form target. Anything else, and every head
behind one that aiohttp is still answering (answers keep the order of their requests),
goes to aiohttp as before, and from there to the request-level way in of
``fast_redirect`` or the app. So does every head on an aiohttp whose internals the
connection handler does not know (``sluice.http.aiohttp_compat``, asked once at start).
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, NamedTuple

from aiohttp import helpers
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11
from multidict import CIMultiDictProxy

from sluice.http.fast_redirect import NO_STORE, ROUTE
from sluice.http.middlewares import TRACE_ID_HEADER
from sluice.telemetry.prometheus import REQUEST_TALLY

if TYPE_CHECKING:
    from sluice.app.declare import FastAnswers


class Asker(NamedTuple):
    """A parsed head and its connection's peer: a ``client_address.Caller``."""

    headers: CIMultiDictProxy[str]
    remote: str | None


class WireRedirects:
    """The bytes of the redirects one site answers on the wire; see the module docstring."""

    __slots__ = ("_date", "_redirects")

    def __init__(self, redirects: FastAnswers) -> None:
        self._redirects = redirects
        # Looked up here, not on import: on an aiohttp without it (sluice.http.aiohttp_compat
        # looks first) there is no wire, and the rest of sluice still imports.
        self._date = helpers.rfc822_formatted_time

    def response(self, message: Any, remote: str | None) -> bytes | None:
        """The whole response to ``message`` (aiohttp's parsed head, which comes without a
        body) with its visit recorded; None: aiohttp answers it (nothing was recorded)."""
        if (
            message.method != "GET"
            or message.version != HttpVersion11
            or message.should_close
            or message.upgrade
        ):
            return None
        path: str = message.path
        if not path.startswith("/"):
            return None  # an absolute-form or asterisk target
        started = time.perf_counter()
        answer = self._redirects.answer(path[1:].partition("?")[0], Asker(message.headers, remote))
        if answer is None:
            return None
        location, status, trace_id = answer
        response = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Location: {location}\r\n"
            f"Cache-Control: {NO_STORE}\r\n"
            f"{TRACE_ID_HEADER}: {trace_id}\r\n"
            "Content-Length: 0\r\n"
            f"Date: {self._date()}\r\n"  # aiohttp's, formatted once a second
            f"Server: {SERVER_SOFTWARE}\r\n\r\n"
        ).encode()
        REQUEST_TALLY.add("GET", ROUTE, status, time.perf_counter() - started)
        return response


_REASONS = {status.value: status.phrase for status in HTTPStatus}
