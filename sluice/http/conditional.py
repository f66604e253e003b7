"""Conditional and range GETs (RFC 9110 sections 13 and 14) of a representation that
never changes once it exists, stored anywhere (not a file, so no ``FileResponse``).

The order is RFC 9110 section 13.2.2's: ``If-Match`` (else ``If-Unmodified-Since``)
can answer 412, then ``If-None-Match`` (else ``If-Modified-Since``) 304, and only
then ``Range`` with its ``If-Range`` is looked at: 206, 416, or the whole 200 (also
for a range unit other than bytes, which section 14.2 says to ignore).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime

from aiohttp import hdrs, web

from sluice.errors import ProblemError, RangeNotSatisfiable

_BYTE_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)", re.ASCII | re.IGNORECASE)
# Longer numbers are all "past any end"; int() of thousands of digits is refused.
_DIGITS = 18


class PreconditionFailed(ProblemError):
    status = 412
    title = "Precondition Failed"


@dataclass(frozen=True)
class Validators:
    """What a client may hold of the representation: its strong ETag (the opaque tag,
    without quotes), the time it was last modified, and its size in bytes."""

    etag: str
    last_modified: datetime
    size: int

    @property
    def modified_s(self) -> int:
        """``Last-Modified`` as sent: HTTP dates have whole seconds."""
        return int(self.last_modified.timestamp())

    def headers(self) -> dict[str, str]:
        """The validators as response headers, with ``Accept-Ranges``."""
        return {
            hdrs.ETAG: f'"{self.etag}"',
            hdrs.LAST_MODIFIED: format_datetime(self.last_modified.astimezone(UTC), usegmt=True),
            hdrs.ACCEPT_RANGES: "bytes",
        }


def not_modified(request: web.Request, current: Validators) -> bool:
    """True when the client's copy is current (answer 304); raises ``PreconditionFailed``
    when the client asked for a copy other than ``current`` (412)."""
    if (if_match := request.if_match) is not None:
        # Strong comparison: a weak tag never matches (section 13.1.1).
        if not any(not tag.is_weak and tag.value in (current.etag, "*") for tag in if_match):
            raise PreconditionFailed("If-Match names no current version of the result")
    elif (since := request.if_unmodified_since) and current.modified_s > since.timestamp():
        raise PreconditionFailed("the result changed after If-Unmodified-Since")
    if (if_none_match := request.if_none_match) is not None:
        # Weak comparison (section 13.1.2).
        return any(tag.value in (current.etag, "*") for tag in if_none_match)
    modified = request.if_modified_since
    return modified is not None and current.modified_s <= modified.timestamp()


def requested_range(request: web.Request, current: Validators) -> tuple[int, int] | None:
    """The bytes ``[start, stop)`` a ``Range`` asks for (206), or None for the whole
    representation (200: no ``Range``, or an ``If-Range`` naming another version).
    A ``Range`` in another unit than bytes is ignored (the whole 200). Raises
    ``RangeNotSatisfiable`` (416) for a byte range past the end, an empty or backwards
    one, and anything but a single byte range."""
    value = request.headers.get(hdrs.RANGE)
    if value is None or not _is_bytes(value) or not _if_range_holds(request, current):
        return None  # a unit other than bytes is ignored (RFC 9110 section 14.2)
    size = current.size
    match = _BYTE_RANGE.fullmatch(value.strip())
    if match is None or match.groups() == ("", ""):
        raise RangeNotSatisfiable(
            "the Range header is not a single byte range 'bytes=first-last'", size
        )
    first, last = match.groups()
    if not first:  # the last bytes: 'bytes=-500'
        if _number(last) == 0:
            raise RangeNotSatisfiable("the range asks for the last 0 bytes", size)
        return max(0, size - _number(last)), size
    start = _number(first)
    stop = _number(last) + 1 if last else size
    if stop <= start:
        raise RangeNotSatisfiable("the range ends before it starts", size)
    if start >= size:
        raise RangeNotSatisfiable(f"the range starts past the end of the {size}-byte result", size)
    return start, min(stop, size)


def _is_bytes(value: str) -> bool:
    """Whether a ``Range`` value is in bytes (units are case-insensitive)."""
    unit, equals, _ = value.strip().partition("=")
    return bool(equals) and unit.strip().lower() == "bytes"


def _if_range_holds(request: web.Request, current: Validators) -> bool:
    """Without ``If-Range``, or when it names ``current`` exactly: a strong ETag, or the
    very ``Last-Modified`` date (section 13.1.5; a weak or other tag never holds)."""
    value = request.headers.get(hdrs.IF_RANGE)
    if value is None:
        return True
    value = value.strip()
    if value.startswith(('"', 'W/"')):
        return value == f'"{current.etag}"'
    moment = request.if_range
    return moment is not None and moment.timestamp() == current.modified_s


def _number(digits: str) -> int:
    return int(digits) if len(digits) <= _DIGITS else 10**_DIGITS
