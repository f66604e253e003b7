"""Whether the aiohttp this process runs on is one whose private parts sluice's
connections are written against, asked once as ``listen`` starts a site (docs/guides/security.md).

Two things in ``sluice.http.connections`` reach into aiohttp's request handler, which
aiohttp may rename or reshape in any release, a patch release included:

- the **head deadline** reads ``_waiter`` (set while the handler waits for a request)
  and ``_request_count`` (the heads parsed so far). Both are the same from aiohttp 3.9
  to 3.14.
- **redirects on the wire** (``sluice.http.redirect_wire``) wrap the parser
  (``_parser``; before 3.14 it was ``_request_parser``, and ``_next_keepalive_close_time``
  came in 3.11), read the queue of parsed heads, whether writing is paused and the
  keep-alive timer's fields, and, since 3.14.1, the parser's ``message_consumed`` and the
  handler's ``_max_msg_queue_size`` (a pair: the one without the other would leave bytes
  unparsed); they read the fields of a parsed head and write aiohttp's own ``Date``
  (``helpers.rfc822_formatted_time``).

pyproject.toml bounds aiohttp to the versions the suite runs on (``WIRE_VERSIONS``, the
same range: tests/unit/test_aiohttp_compat.py holds the two together), but an
install can still bring another: a constraint that overrides it, a distribution's
package. So ``check`` looks once, at the version and at a request handler and parser
made as aiohttp makes them for a connection (with a head parsed by it), and anything
it does not know is said in one warning, with the version, and costs speed, never
requests:

- the wire is off: every redirect goes to aiohttp and the request-level fast path
  (``sluice.http.fast_redirect``), which uses aiohttp's public API only;
- without ``_waiter`` or ``_request_count`` the head deadline is off too (every
  connection would otherwise fail on its first bytes); aiohttp's keep-alive timeout
  still closes a connection that sends no complete head.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog
from aiohttp import helpers, web
from aiohttp.http import HttpVersion11
from aiohttp.streams import EMPTY_PAYLOAD

log = structlog.get_logger(__name__)

# The aiohttp releases the wire path is written against and the suite runs on, from the
# first (inclusive) to the last (exclusive): pyproject.toml's ``aiohttp>=3.14.4,<3.15``.
# sluice itself needs 3.14 (``web.RequestKey``); before 3.14.4 a kept-alive connection
# that only the wire path answered was never closed when idle (its keep-alive timer
# started with the first answer aiohttp wrote itself); the lowest-versions step runs the
# wire tests on 3.14.4, the lock on the newest 3.14.
WIRE_VERSIONS = ((3, 14, 4), (3, 15, 0))

HEAD_DEADLINE_NAMES = ("_loop", "_request_count", "_waiter")
WIRE_HANDLER_NAMES = (
    "_close",
    "_force_close",
    "_keepalive",
    "_keepalive_handle",
    "_keepalive_timeout",
    "_messages",
    "_next_keepalive_close_time",
    "_parser",
    "_paused",
    "_process_keepalive",
    "transport",
)
# Present together (aiohttp >= 3.14.1: its queue of parsed heads has a limit) or not at all.
QUEUE_LIMIT_NAMES = ("_max_msg_queue_size", "_parser.message_consumed")

_PROBE = b"GET /probe?q HTTP/1.1\r\nHost: probe\r\n\r\n"


@dataclass(frozen=True)
class AiohttpFit:
    """What ``check`` found: ``missing`` names what it did not find as the connections
    read it; ``wire`` and ``head_deadline``: whether each may be used."""

    version: str
    missing: tuple[str, ...]
    wire: bool
    head_deadline: bool


def check(server: web.Server) -> AiohttpFit:
    """How this aiohttp fits the connections of ``server`` (an ``AppRunner``'s, after
    ``setup()``); anything it does not know is logged once, as a warning."""
    version = aiohttp.__version__
    missing: list[str] = []
    if not _version_known(version):
        first, last = (".".join(map(str, release)) for release in WIRE_VERSIONS)
        missing.append(f"aiohttp>={first},<{last}")
    try:
        probe = web.RequestHandler(server, loop=asyncio.get_running_loop())
    except Exception as exc:  # a constructor reshaped: nothing below can be looked at
        return _fit(version, [*missing, f"web.RequestHandler(server, loop=...): {exc!r}"])
    deadline_missing = [name for name in HEAD_DEADLINE_NAMES if not _has(probe, name)]
    missing += deadline_missing
    missing += [name for name in WIRE_HANDLER_NAMES if not _has(probe, name)]
    missing += _queue_limit_missing(probe)
    if not hasattr(helpers, "rfc822_formatted_time"):
        missing.append("aiohttp.helpers.rfc822_formatted_time")
    if _has(probe, "_parser"):
        missing += _head_shape_missing(probe._parser)
    return _fit(version, missing, head_deadline=not deadline_missing)


def _fit(version: str, missing: list[str], *, head_deadline: bool = False) -> AiohttpFit:
    fit = AiohttpFit(version, tuple(missing), wire=not missing, head_deadline=head_deadline)
    if missing:
        log.warning(
            "aiohttp unknown to the connections: redirects answered through the request"
            " path, not on the wire" + ("" if head_deadline else ", and no head deadline"),
            aiohttp=version,
            missing=list(missing),
        )
    return fit


def _version_known(version: str) -> bool:
    """Whether ``version``'s release (its first three numbers) is in ``WIRE_VERSIONS``; a
    pre-release of the last is not (``3.15.0a1``), a later development build is."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        return False
    first, last = WIRE_VERSIONS
    return first <= (int(match[1]), int(match[2]), int(match[3] or 0)) < last


def _has(obj: Any, dotted: str) -> bool:
    for name in dotted.split("."):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            return False
    return True


def _queue_limit_missing(probe: web.RequestHandler) -> list[str]:
    found = [_has(probe, name) for name in QUEUE_LIMIT_NAMES]
    if all(found) or not any(found):
        return []
    return [name for name, there in zip(QUEUE_LIMIT_NAMES, found, strict=True) if not there]


def _head_shape_missing(parser: Any) -> list[str]:
    """What of a parsed head the wire path reads is not where it reads it: the parser's
    ``feed_data`` gives (messages, upgraded, tail), each message a (head, payload)."""
    try:
        messages, upgraded, _ = parser.feed_data(_PROBE)
        ((head, payload),) = messages
        expected: dict[str, Callable[[Any], bool]] = {
            "method": lambda value: value == "GET",
            "path": lambda value: value == "/probe?q",
            "version": lambda value: value == HttpVersion11,
            "should_close": lambda value: value is False,
            "upgrade": lambda value: value is False,
            "headers": lambda value: value.get("host") == "probe",
        }
        wrong = [f"head.{name}" for name, ok in expected.items() if not ok(getattr(head, name))]
        if upgraded or payload is not EMPTY_PAYLOAD:
            wrong.append("an empty payload for a GET without a body")
        return wrong
    except Exception as exc:
        return [f"a parsed head as the wire path reads it: {exc!r}"]
