"""``GET /v1/links/stats``: the caller's links by visits over a range of UTC days.

Listed before ``/v1/links/{code}`` in the router, which would take ``stats`` for
a code (and ``stats`` is a reserved alias, so no link can be named so).
"""

from __future__ import annotations

from datetime import UTC

from aiohttp import web

from sluice.app import (
    UNAUTHORIZED,
    USER,
    FieldError,
    Route,
    Unprocessable,
    json_response,
    limit_query,
    ok,
    parse_limit,
    problem,
    require_user,
    store,
    utcnow,
)
from sluice.builtin.links.http.link_stats import RANGE, RANGE_422, stats_range
from sluice.builtin.links.http.link_stats_schemas import LinkVisitsOut, TopLinksOut
from sluice.builtin.links.stats.reads import read_top_links

LIMIT_DEFAULT = 10
LIMIT_MAX = 100


async def top_links(request: web.Request) -> web.Response:
    user = await require_user(request)
    limit = parse_limit(request.query.get("limit", str(LIMIT_DEFAULT)), LIMIT_MAX)
    errors = [] if limit else [FieldError("limit", f"must be an integer from 1 to {LIMIT_MAX}")]
    try:
        first, last = stats_range(request.query, utcnow().astimezone(UTC).date())
    except Unprocessable as exc:
        raise Unprocessable(exc.detail, [*exc.errors, *errors]) from None
    if limit is None:
        raise Unprocessable("invalid query parameters", errors)
    links = await read_top_links(store(request), user.id, first, last, limit)
    return json_response(
        TopLinksOut(
            from_=first,
            to=last,
            links=[
                LinkVisitsOut(
                    code=link.code,
                    url=link.url,
                    title=link.title,
                    visits=link.visits,
                    human=link.visits - link.bots,
                    bots=link.bots,
                )
                for link in links
            ],
        )
    )


ROUTES = (
    Route(
        "GET",
        "/v1/links/stats",
        top_links,
        {
            "operationId": "topLinks",
            "summary": "The caller's links, the most visited over a range of days first",
            "description": (
                "Visits are GET redirects over the UTC days `from` to `to`, as "
                "`/v1/links/{code}/stats` counts them (`human = visits - bots`). Links with the "
                "same visits come by code; when fewer than `limit` links were visited, the "
                "newest links without visits follow, with zeros. Eventually consistent (seconds)."
            ),
            "security": USER,
            "parameters": [
                *RANGE,
                limit_query(LIMIT_DEFAULT, LIMIT_MAX),
            ],
            "responses": {
                "200": ok(TopLinksOut, "the links, most visits first"),
                "401": UNAUTHORIZED,
                "422": problem(f"{RANGE_422}, or a limit outside 1..{LIMIT_MAX}"),
            },
        },
        structs=(TopLinksOut,),
    ),
)
