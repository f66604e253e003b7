"""The event routes of docs/guides/operate.md for the operator (admin token): the search
(``sluice.history.search``; every parameter's fault named in one 422), one
event with its deliveries and a trace's events (``sluice.builtin.operations.stories``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    json_response,
    ok,
    problem,
    require_admin,
    store,
)
from sluice.app.advanced import (
    APPS,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    Doc,
    EventPage,
    EventQuery,
    Invalid,
    event_search,
)
from sluice.builtin.operations import stories
from sluice.builtin.operations.settings import OperationsSettings

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


def _processed(request: web.Request) -> list[str]:
    """The processed tables of every projection this deployment runs."""
    return [p.processed_table for p in request.app[APPS].projections.values()]


def _trace_link(request: web.Request) -> stories.TraceLink:
    """A trace's page in the team's tracing UI (SLUICE_TRACE_URL), by its id."""
    return OperationsSettings.of(request).trace_link


async def search_events(request: web.Request) -> web.Response:
    """A page of events, newest first; ``next_cursor`` is null on the last page."""
    await require_admin(request)
    return json_response(await event_search.search(store(request), _query(request)))


async def show_event(request: web.Request) -> web.Response:
    """One event of the hot history with its stream entries and every delivery."""
    await require_admin(request)
    event_id = request.match_info["event_id"]
    story = None
    if len(event_id) <= 64:  # longer is no event id (they are UUIDs)
        story = await stories.event_story(
            store(request), event_id, _processed(request), _trace_link(request)
        )
    if story is None:
        raise NotFound("no such event in the hot history (archived events are not shown)")
    return json_response(story)


async def show_trace(request: web.Request) -> web.Response:
    """Every event committed under the trace, oldest first, each with its deliveries."""
    await require_admin(request)
    raw = request.match_info["trace_id"]
    try:
        trace = event_search.trace_id(raw)
    except Invalid as exc:
        raise Unprocessable("invalid trace id", [FieldError("trace_id", str(exc))]) from None
    story = await stories.trace_story(
        store(request), trace, _processed(request), _trace_link(request)
    )
    return json_response(story)


def _filter(name: str, description: str) -> Doc:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


ROUTES = (
    Route(
        "GET",
        "/v1/admin/events",
        search_events,
        {
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
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": f"events per page (default {LIMIT_DEFAULT})",
                    "schema": {"type": "integer", "minimum": 1, "maximum": LIMIT_MAX},
                },
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
        },
        structs=(EventPage,),
    ),
    Route(
        "GET",
        "/v1/admin/events/{event_id}",
        show_event,
        {
            "operationId": "showEvent",
            "summary": "One event, its stream entries and every delivery of it to every group",
            "description": (
                "`deliveries` lists each attempt in time order (when its batch's handler was"
                " called; a projection's attempt is recorded with its batch): the group, the"
                " consumer, the attempt number (Redis's delivery count across retries), the"
                " outcome (`handled`, `duplicate`: applied before, `failed`: retried later,"
                " `dead_lettered`, `cancelled`), the error, when the batch's handler was"
                " called and how long it ran (a batch's attempts share it). `stream_entries`"
                " are the entries those deliveries read (the aggregate stream, then retry"
                " streams). Attempts are kept SLUICE_DELIVERY_RETENTION seconds. `trace_url` is"
                " the event's trace in the team's tracing UI: SLUICE_TRACE_URL with the trace id"
                " filled in, URL-encoded (null when unset)."
            ),
            "security": ADMIN,
            "parameters": [
                {"name": "event_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "responses": {
                "200": ok(stories.EventStory, "the event"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "404": problem("no such event in the hot history (archived events are not shown)"),
                "503": problem("the database does not answer"),
            },
        },
        structs=(stories.EventStory,),
    ),
    Route(
        "GET",
        "/v1/admin/traces/{trace_id}",
        show_trace,
        {
            "operationId": "showTrace",
            "summary": "The story of a request: every event of its trace, with its deliveries",
            "description": (
                "Every event of the hot history committed under the trace id (the request's,"
                " or a task run's), oldest first, each with its deliveries as"
                " `GET /v1/admin/events/{event_id}` shows them. Events a handler appends while"
                " handling a delivery carry that delivery's trace id, so they follow in turn."
                f" At most {stories.TRACE_EVENTS_MAX} events (`truncated` says when there were"
                " more). An unknown trace id answers an empty list. `trace_url` is the trace in"
                " the team's tracing UI: SLUICE_TRACE_URL with the trace id filled in,"
                " URL-encoded (null when unset)."
            ),
            "security": ADMIN,
            "parameters": [
                {"name": "trace_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "responses": {
                "200": ok(stories.TraceStory, "the trace's events"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "422": problem("not a trace id (1-128 of A-Z a-z 0-9 . _ : -)"),
                "503": problem("the database does not answer"),
            },
        },
        structs=(stories.TraceStory,),
    ),
)
