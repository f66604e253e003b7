"""Event search (docs/guides/operate.md): the history's events, newest first, by type, aggregate,
trace id and time, a page at a time.

The order is ``(created_at, seq)`` descending. Migration 15 adds two indexes that
go on with exactly those two columns, one per type and one per trace id: a type or a
trace, with the time range, is one index range read in page order from the cursor on
and stopped after ``limit`` rows. An aggregate is the union of its types, and no
filter the union of every type: the newest ``limit`` + 1 of each type's range,
merged (see ``page_sql``). No page scans or sorts more than that, however long the
history. Every index is paid on every append, so there is none per aggregate and
none for the time alone.

Only the hot table is searched. Archived events (``sluice/history``) sit in
compressed segments whose index knows their aggregate, seq and time range but no
trace id, and an index per event of them would bring back the bytes the archive
saves; ``hot_since`` on a page tells which time the search reaches back to.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from sluice.errors import SluiceError
from sluice.events import AGGREGATES, EVENT_TYPES

if TYPE_CHECKING:
    from sluice.store import Store
    from sluice.store.base import Row

# Events per page of a search when the query names no limit.
LIMIT_DEFAULT = 50
# The most events one page of a search may ask for.
LIMIT_MAX = 500
# Trace ids are W3C trace ids (32 hex digits), or, in events older than 2026-12-07, a
# client's X-Request-ID (the middleware's alphabet); anything else cannot name a trace.
_TRACE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_CURSOR = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?\+00:00) (\d{1,19})")
# The columns of an event as ``found`` reads them.
COLUMNS = "seq, event_id, type, aggregate, trace_id, created_at, payload"


class Invalid(SluiceError):
    """A search parameter is not acceptable; the message says why, for a field error."""


class FoundEvent(msgspec.Struct, frozen=True):
    """One event as the search returns it; ``data`` is its payload, as stored."""

    seq: int
    event_id: str
    type: str
    aggregate: str
    trace_id: str
    created_at: str
    data: msgspec.Raw


class EventPage(msgspec.Struct, frozen=True):
    """A page of events, newest first; ``next_cursor`` is null on the last page.
    ``hot_since``: the oldest event the search reaches (older ones are archived and
    not searched); null when the table holds no event."""

    items: list[FoundEvent]
    next_cursor: str | None
    hot_since: str | None


@dataclass(frozen=True)
class EventQuery:
    """One page's search of the event history: its filters (type, aggregate, trace id,
    stored time from ``since`` to before ``until``), its ``limit`` and the previous
    page's last event to continue ``after``."""

    type: str | None = None
    aggregate: str | None = None
    trace_id: str | None = None
    since: str | None = None  # stored time, inclusive
    until: str | None = None  # stored time, exclusive
    limit: int = LIMIT_DEFAULT
    after: tuple[str, int] | None = None  # (created_at, seq) of the previous page's last


def page_limit(raw: str) -> int:
    """Events per page: an integer from 1 to ``LIMIT_MAX``."""
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 6 else 0
    if not 1 <= value <= LIMIT_MAX:
        raise Invalid(f"must be an integer from 1 to {LIMIT_MAX}")
    return value


def event_type(raw: str) -> str:
    if raw not in EVENT_TYPES:
        raise Invalid(f"is not an event type; known: {', '.join(sorted(EVENT_TYPES))}")
    return raw


def aggregate(raw: str) -> str:
    if raw not in AGGREGATES:
        raise Invalid(f"is not an aggregate; known: {', '.join(sorted(AGGREGATES))}")
    return raw


def trace_id(raw: str) -> str:
    if not _TRACE_ID.fullmatch(raw):
        raise Invalid("is not a trace id (1-128 of A-Z a-z 0-9 . _ : -)")
    return raw


def instant(raw: str) -> str:
    """An RFC 3339 time with its offset, spelled as the history stores times."""
    try:
        moment = datetime.fromisoformat(raw.strip().replace("z", "Z"))
    except ValueError:
        raise Invalid("is not an RFC 3339 time, e.g. 2026-12-01T09:30:00Z") from None
    if moment.tzinfo is None:
        raise Invalid("needs its offset from UTC (Z or +hh:mm)")
    return stored_time(moment)


def stored_time(moment: datetime) -> str:
    """``moment`` as ``events.created_at`` spells it (``isoformat()`` in UTC, no fraction
    when it is zero), so equal times are equal texts and text order is time order: a
    time without a fraction sorts before the same second with one ('+' before '.')."""
    return moment.astimezone(UTC).isoformat()


def encode_cursor(event: FoundEvent) -> str:
    raw = f"{event.created_at} {event.seq}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise Invalid("is not a cursor this API returned") from None
    match = _CURSOR.fullmatch(raw)
    if match is None:
        raise Invalid("is not a cursor this API returned")
    return match[1], int(match[2])


def _range(query: EventQuery) -> tuple[list[str], list[object]]:
    """The time range and the cursor: conditions on ``(created_at, seq)``."""
    conditions: list[str] = []
    params: list[object] = []
    if query.since is not None:
        conditions.append("created_at >= ?")
        params.append(query.since)
    if query.until is not None:
        conditions.append("created_at < ?")
        params.append(query.until)
    if query.after is not None:
        conditions.append("(created_at, seq) < (?, ?)")
        params += query.after
    return conditions, params


def _types(query: EventQuery) -> list[str]:
    """The event types whose index ranges make the page, when no trace id is given."""
    if query.type is not None:
        matches = query.aggregate is None or EVENT_TYPES[query.type].aggregate == query.aggregate
        return [query.type] if matches else []
    return sorted(t for t, cls in EVENT_TYPES.items() if query.aggregate in (None, cls.aggregate))


def _select(conditions: list[str]) -> str:
    return (
        f"SELECT {COLUMNS} FROM events WHERE {' AND '.join(conditions)}"
        " ORDER BY created_at DESC, seq DESC LIMIT ?"
    )


def page_sql(query: EventQuery) -> tuple[str, list[object]]:
    """The page's statement (``limit`` + 1 rows: one more says whether a page follows).

    A trace id is one range of ``events_trace`` (type and aggregate checked on its
    few rows); a type is one range of ``events_type``. An aggregate, or no filter,
    is the newest ``limit`` + 1 of each of its types, each one range of
    ``events_type``, merged: at most that many rows per type are read, never the
    whole history.
    """
    conditions, params = _range(query)
    rows = query.limit + 1
    if query.trace_id is not None:
        exact = [("trace_id", query.trace_id), ("type", query.type), ("aggregate", query.aggregate)]
        named = [(f"{column} = ?", value) for column, value in exact if value is not None]
        return (
            _select([c for c, _ in named] + conditions),
            [v for _, v in named] + params + [rows],
        )
    types = _types(query)
    if len(types) == 1:
        return _select(["type = ?", *conditions]), [types[0], *params, rows]
    if not types:  # a type of another aggregate: nothing can match
        return _select(["1 = 0"]), [rows]
    parts = [
        f"SELECT * FROM ({_select(['type = ?', *conditions])}) AS t{i}" for i in range(len(types))
    ]
    sql = " UNION ALL ".join(parts) + " ORDER BY created_at DESC, seq DESC LIMIT ?"
    return sql, [p for t in types for p in (t, *params, rows)] + [rows]


def found(row: Row) -> FoundEvent:
    """An event from a row of ``COLUMNS``."""
    seq, event_id, kind, aggr, trace, created, payload = row
    return FoundEvent(
        int(seq),
        str(event_id),
        str(kind),
        str(aggr),
        str(trace),
        str(created),
        msgspec.Raw(bytes(payload)),
    )


async def search(store: Store, query: EventQuery) -> EventPage:
    sql, params = page_sql(query)
    rows = await store.fetchall(sql, params)
    items = [found(row) for row in rows[: query.limit]]
    more = len(rows) > query.limit
    oldest = await store.fetchone("SELECT created_at FROM events ORDER BY seq LIMIT 1")
    return EventPage(
        items=items,
        next_cursor=encode_cursor(items[-1]) if more else None,
        hot_since=None if oldest is None else str(oldest[0]),
    )


def aggregate_id(raw: str) -> tuple[str, str]:
    """``TYPE:ID``: one aggregate of a known type."""
    kind, colon, ident = raw.partition(":")
    if not colon or not ident:
        raise Invalid("is not TYPE:ID (orders:01J..., an aggregate type and an id)")
    return aggregate(kind), ident


async def of_aggregate(store: Store, kind: str, ident: str) -> list[tuple[int, FoundEvent]]:
    """The events an event-sourced aggregate saved (``sluice.app.Aggregate``), each with
    its version, in version order (one range of ``aggregate_events``' key)."""
    columns = ", ".join(f"e.{c.strip()}" for c in COLUMNS.split(","))
    rows = await store.fetchall(
        f"SELECT a.version, {columns} FROM aggregate_events a"
        " JOIN events e ON e.event_id = a.event_id"
        " WHERE a.aggregate = ? AND a.aggregate_id = ? ORDER BY a.version",
        (kind, ident),
    )
    return [(int(row[0]), found(row[1:])) for row in rows]


class SavedVersion(msgspec.Struct, frozen=True):
    """An event an event-sourced aggregate saved: which aggregate, at which version, the
    aggregate's version now, and its snapshot's (version and the class's state version)
    if it has one."""

    aggregate_id: str
    version: int
    latest: int
    snapshot_version: int | None
    snapshot_state_version: int | None


async def saved_version(store: Store, event_id: str) -> SavedVersion | None:
    """What ``aggregate_events`` says of ``event_id``; None for an event no aggregate saved."""
    row = await store.fetchone(
        "SELECT a.aggregate, a.aggregate_id, a.version,"
        " (SELECT MAX(b.version) FROM aggregate_events b"
        "  WHERE b.aggregate = a.aggregate AND b.aggregate_id = a.aggregate_id),"
        " s.version, s.state_version"
        " FROM aggregate_events a LEFT JOIN aggregate_snapshots s"
        " ON s.aggregate = a.aggregate AND s.aggregate_id = a.aggregate_id"
        " WHERE a.event_id = ?",
        (event_id,),
    )
    if row is None:
        return None
    _, ident, version, latest, snapshot, state = row
    return SavedVersion(
        str(ident),
        int(version),
        int(latest),
        None if snapshot is None else int(snapshot),
        None if state is None else int(state),
    )
