"""A link's visits read from the event history, and their CSV rows.

There is no index from a link to its visits: an export reads every
``LinkVisited`` event in a window of sequence numbers and the database keeps
the link's (a JSON field of the payload, in each backend's dialect), so only
matching rows cross into Python and the filtering runs in the database, not on
the event loop.
``bench/export_scan.py`` compared it with decoding every payload's ``code``
with msgspec in Python: SQL is about 15% faster for a link with 1% of the
visits, even at 10%, and 25% slower at 50% (figures in bench/README.md, export_scan.py).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import msgspec

from sluice.app import Store
from sluice.app.advanced import SegmentRef, catalog, read_history

VISIT_TYPES = ("LinkVisited",)
# country, os and device since migration 24 (docs/guides/links.md); empty in older visits and when
# unknown.
HEADER = ("visited_at", "visitor", "referrer_host", "browser", "is_bot", "country", "os", "device")

_SCAN = (
    "SELECT payload FROM events WHERE seq > ? AND seq <= ? AND type = 'LinkVisited'"
    " AND {code} = ? ORDER BY seq"
)
# A spreadsheet runs a cell starting with one of these as a formula (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class Visit(msgspec.Struct, frozen=True):
    """The fields of a ``LinkVisited`` payload an export writes; the rest is ignored."""

    occurred_at: str
    visitor: str
    referrer_host: str | None = None
    browser: str = "Other"
    is_bot: bool = False
    country: str | None = None
    os: str | None = None
    device: str | None = None


_decoder = msgspec.json.Decoder(Visit)


class _Coded(msgspec.Struct):
    code: str


_code_decoder = msgspec.json.Decoder(_Coded)


async def scan(store: Store, code: str, after: int, upto: int) -> list[Visit]:
    """Visits of ``code`` with ``after < seq <= upto``, in history order, archived or hot.

    Where no segment holds visits of the window, the database filters the hot table;
    else the window is read through the history reader and filtered here. The segments
    are listed again after the table's read: one archived meanwhile sends the window
    to the reader, so a visit is never missed.
    """
    if not await _archived(store, after, upto):
        sql = _SCAN.format(code=store.dialect.payload_field("code"))
        rows = await store.fetchall(sql, (after, upto, code))
        if not await _archived(store, after, upto):
            return [_decoder.decode(row[0]) for row in rows]
    found: list[Visit] = []
    async for chunk in read_history(store, VISIT_TYPES, after, upto=upto):
        found.extend(
            _decoder.decode(payload)
            for _, payload in chunk
            if _code_decoder.decode(payload).code == code
        )
    return found


async def _archived(store: Store, after: int, upto: int) -> list[SegmentRef]:
    return [
        s
        for s in await catalog.segments(store, after=after, types=VISIT_TYPES)
        if s.first_seq <= upto
    ]


async def window_end(store: Store, after: int, batch: int, snapshot: int) -> int:
    """Where an export's window from ``after`` ends: ``batch`` seq numbers on, or the end
    of the segment it reaches into, so each segment is decoded once per export."""
    upto = min(after + batch, snapshot)
    for segment in await _archived(store, after, upto):
        upto = min(max(upto, segment.last_seq), snapshot)
    return upto


def utc_time(text: str) -> str:
    """RFC 3339 in UTC with ``Z``: events written by sluice already are; others convert."""
    if text.endswith("Z"):
        return text
    moment = datetime.fromisoformat(text).astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _cell(text: str | None) -> str:
    if text and text.startswith(_FORMULA_START):
        return "'" + text
    return text or ""


def header() -> bytes:
    return _rows_to_bytes([HEADER])


def csv_rows(visits: Sequence[Visit]) -> bytes:
    """The visits as CSV lines (RFC 4180, CRLF, UTF-8)."""
    return _rows_to_bytes(
        (
            utc_time(v.occurred_at),
            v.visitor,
            _cell(v.referrer_host),
            _cell(v.browser),
            "true" if v.is_bot else "false",
            v.country or "",
            v.os or "",
            v.device or "",
        )
        for v in visits
    )


def _rows_to_bytes(rows: Iterable[Sequence[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()
