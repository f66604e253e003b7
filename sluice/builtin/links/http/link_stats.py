"""``GET /v1/links/{code}/stats``: a link's visit statistics over a range of UTC days, for
its owner only. Every figure follows the range (sluice/builtin/links/stats/reads.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, timedelta

from aiohttp import web

from sluice.app import (
    UNAUTHORIZED,
    USER,
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    json_response,
    ok,
    problem,
    require_user,
    store,
    utcnow,
)
from sluice.builtin.links.http.link_stats_schemas import (
    BrowserVisits,
    CountryVisits,
    DeviceVisits,
    LinkStatsDay,
    LinkStatsOut,
    OsVisits,
    ReferrerVisits,
)
from sluice.builtin.links.http.schemas import CODE, NO_LINK
from sluice.builtin.links.stats.reads import TOP_ROWS, read_stats
from sluice.builtin.links.stored import get_link

DEFAULT_DAYS = 30
MAX_DAYS = 366
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _day(query: Mapping[str, str], name: str, errors: list[FieldError]) -> date | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        if not _DATE.fullmatch(raw):
            raise ValueError(raw)
        return date.fromisoformat(raw)
    except ValueError:
        errors.append(FieldError(name, "must be a date as YYYY-MM-DD (UTC)"))
        return None


def stats_range(query: Mapping[str, str], today: date) -> tuple[date, date]:
    """``from``..``to`` (inclusive UTC days); by default the last 30 days up to today."""
    errors: list[FieldError] = []
    first, last = _day(query, "from", errors), _day(query, "to", errors)
    if errors:
        raise Unprocessable("invalid query parameters", errors)
    if last is None:
        last = today
    if first is None:  # the last 30 days, or as many as the calendar has before `to`
        first = last - timedelta(days=min(DEFAULT_DAYS - 1, (last - date.min).days))
    if first > last:
        raise Unprocessable("invalid range", [FieldError("from", "must not be after `to`")])
    if (last - first).days + 1 > MAX_DAYS:
        message = f"the range may span at most {MAX_DAYS} days"
        raise Unprocessable("invalid range", [FieldError("to", message)])
    return first, last


async def link_stats(request: web.Request) -> web.Response:
    user = await require_user(request)
    code = request.match_info["code"]
    db = store(request)
    link = await get_link(db, code)
    if link is None or link.owner_id != user.id:
        raise NotFound(f"you have no short link {code}")
    now = utcnow()
    first, last = stats_range(request.query, now.astimezone(UTC).date())
    stats = await read_stats(db, code, first, last)
    facets = stats.facets
    return json_response(
        LinkStatsOut(
            code=code,
            from_=first,
            to=last,
            total=stats.total,
            human=stats.total - stats.bots,
            bots=stats.bots,
            unique_visitors=stats.unique_visitors,
            days=[
                LinkStatsDay(date=d.day, visits=d.visits, unique_visitors=d.unique_visitors)
                for d in stats.days
            ],
            referrers=[ReferrerVisits(referrer=r, visits=n) for r, n in facets["referrer"]],
            browsers=[BrowserVisits(browser=b or "Other", visits=n) for b, n in facets["browser"]],
            countries=[CountryVisits(country=c, visits=n) for c, n in facets["country"]],
            os=[OsVisits(os=o, visits=n) for o, n in facets["os"]],
            devices=[DeviceVisits(device=d, visits=n) for d, n in facets["device"]],
            as_of=now,
        )
    )


# The query parameters of a range, as stats_range reads them.
RANGE = [
    {
        "name": "from",
        "in": "query",
        "required": False,
        "description": "first UTC day, YYYY-MM-DD; default `to` minus 29 days",
        "schema": {"type": "string", "format": "date"},
    },
    {
        "name": "to",
        "in": "query",
        "required": False,
        "description": f"last UTC day, YYYY-MM-DD; default today; at most {MAX_DAYS} days in all",
        "schema": {"type": "string", "format": "date"},
    },
]
RANGE_422 = f"a date not YYYY-MM-DD, `from` after `to`, or more than {MAX_DAYS} days"

ROUTES = (
    Route(
        "GET",
        "/v1/links/{code}/stats",
        link_stats,
        {
            "operationId": "linkStats",
            "summary": "Visit statistics of one of the caller's links",
            "description": (
                "Every figure covers the UTC days `from` to `to` (both answered). `total` counts "
                "GET redirects (never HEAD); `bots` those from a known crawler or link previewer; "
                "`human = total - bots`; `unique_visitors` counts distinct keyed hashes of the "
                "client address + User-Agent over the whole range (a visitor of several days "
                "counts once), each day's over that day. `days` lists every day, zeros included. "
                "`referrers` (by host), `browsers`, `countries` (ISO 3166-1 alpha-2 of the "
                "client address, forwarded by a trusted proxy), `os` (android, ios, windows, "
                "macos, linux) and `devices` (mobile, tablet, "
                f"desktop) list the {TOP_ROWS} busiest "
                "values each, most visits first; null stands for no Referer or a value that "
                "could not be told. Eventually consistent (seconds), exact once the workers "
                "drain; `as_of` is the time of the read."
            ),
            "security": USER,
            "parameters": [CODE, *RANGE],
            "responses": {
                "200": ok(LinkStatsOut, "the statistics"),
                "401": UNAUTHORIZED,
                "404": NO_LINK,
                "422": problem(RANGE_422),
            },
        },
        structs=(LinkStatsOut,),
    ),
)
