"""``GET /v1/admin/events``: the event search of SPEC 12 (``sluice.operations.event_search``)
for the operator (admin token). Every parameter's fault is named in one 422."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

from sluice.errors import FieldError, Unprocessable
from sluice.http.apidoc import ADMIN, FORBIDDEN, UNAUTHORIZED, Doc, Route, ok, problem
from sluice.http.auth import require_admin
from sluice.http.bodies import json_response
from sluice.http.keys import STORE
from sluice.operations import event_search
from sluice.operations.event_search import (
    LIMIT_DEFAULT,
    LIMIT_MAX,
    EventPage,
    EventQuery,
    Invalid,
)

T = TypeVar("T")


def _query(request: web.Request) -> EventQuery:
    """The search the query parameters ask for; 422 naming every one that is wrong."""
    errors: list[FieldError] = []

    def checked(name: str, check: Callable[[str], T]) -> T | None:
        raw = request.query.get(name)
        if raw is None:
            return None
        try:
            return check(raw)
        except Invalid as exc:
            errors.append(FieldError(name, str(exc)))
            return None

    query = EventQuery(
        type=checked("type", event_search.event_type),
        aggregate=checked("aggregate", event_search.aggregate),
        trace_id=checked("trace_id", event_search.trace_id),
        since=checked("since", event_search.instant),
        until=checked("until", event_search.instant),
        after=checked("cursor", event_search.decode_cursor),
        limit=checked("limit", event_search.page_limit) or LIMIT_DEFAULT,
    )
    if query.since is not None and query.until is not None and query.since >= query.until:
        errors.append(FieldError("until", "must be later than since"))
    if errors:
        raise Unprocessable("invalid query parameters", errors)
    return query


async def search_events(request: web.Request) -> web.Response:
    """A page of events, newest first; ``next_cursor`` is null on the last page."""
    await require_admin(request)
    return json_response(await event_search.search(request.app[STORE], _query(request)))


def _filter(name: str, description: str) -> Doc:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": {"type": "string"}}  # fmt: skip


ROUTES = (
    Route("GET", "/v1/admin/events", search_events, {
        "operationId": "searchEvents",
        "summary": "Search the event history: by type, aggregate, trace id and time",
        "description": (
            "The events of the hot history (the events table), newest first by `created_at`"
            " then `seq`, a page at a time; filters combine. Every filter is served by an"
            " index (a type's or a trace's range; an aggregate and no filter merge the"
            " ranges of their types), so a page costs the same on any length of history."
            " Archived events are not searched: `hot_since` is the time of the oldest event"
            " the search reaches. `data` is the event as stored (its JSON)."
        ),
        "security": ADMIN,
        "parameters": [
            _filter("type", "an event type, e.g. `UserRegistered`"),
            _filter("aggregate", "an aggregate, e.g. `users`: every type of it"),
            _filter("trace_id", "the trace id of a request or a task run"),
            _filter("since", "RFC 3339 time with its offset; events at or after it"),
            _filter("until", "RFC 3339 time with its offset; events before it"),
            {"name": "limit", "in": "query", "required": False,
             "description": f"events per page (default {LIMIT_DEFAULT})",
             "schema": {"type": "integer", "minimum": 1, "maximum": LIMIT_MAX}},
            _filter("cursor", "`next_cursor` of the previous page"),
        ],
        "responses": {
            "200": ok(EventPage, "one page; `next_cursor` is null on the last one"),
            "401": UNAUTHORIZED,
            "403": FORBIDDEN,
            "422": problem(
                "an unknown type or aggregate, a malformed trace id, a time that is not"
                " RFC 3339 with an offset, `until` not after `since`, a limit outside"
                f" 1..{LIMIT_MAX}, or a cursor this API did not return (each one named)"
            ),
            "503": problem("the database does not answer"),
        },
    }, structs=(EventPage,)),
)  # fmt: skip
