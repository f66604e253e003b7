"""``GET /v1/links/{code}/stats``: a link's visit statistics, for its owner only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, timedelta

from aiohttp import web

from sluice.errors import FieldError, NotFound, Unprocessable
from sluice.events import utcnow
from sluice.http.apidoc import CODE, NO_LINK, UNAUTHORIZED, USER, Route, ok, problem
from sluice.http.auth import require_user
from sluice.http.bodies import json_response
from sluice.http.keys import STORE
from sluice.http.schemas import BrowserVisits, LinkStatsDay, LinkStatsOut, ReferrerVisits
from sluice.projections.link_stats import read_stats
from sluice.store.links import get_link

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
    store = request.app[STORE]
    link = await get_link(store, code)
    if link is None or link.owner_id != user.id:
        raise NotFound(f"you have no short link {code}")
    now = utcnow()
    first, last = stats_range(request.query, now.astimezone(UTC).date())
    stats = await read_stats(store, code, first, last)
    return json_response(
        LinkStatsOut(
            code=code,
            total=stats.total,
            human=stats.total - stats.bots,
            bots=stats.bots,
            unique_visitors=stats.unique_visitors,
            days=[
                LinkStatsDay(date=d.day, visits=d.visits, unique_visitors=d.unique_visitors)
                for d in stats.days
            ],
            referrers=[ReferrerVisits(referrer=r, visits=n) for r, n in stats.referrers],
            browsers=[BrowserVisits(browser=b, visits=n) for b, n in stats.browsers],
            as_of=now,
        )
    )


ROUTES = (
    Route("GET", "/v1/links/{code}/stats", link_stats, {
        "operationId": "linkStats",
        "summary": "Visit statistics of one of the caller's links",
        "description": (
            "`total` counts GET redirects (never HEAD); `bots` those from a known crawler or "
            "link previewer; `human = total - bots`; `unique_visitors` counts distinct keyed "
            "hashes of IP + User-Agent. Totals, `referrers` (by host; null for no Referer) and "
            "`browsers` (the 100 busiest each) cover the link's whole life; `days` lists every "
            "UTC day from `from` to `to`, zeros included. Eventually consistent (seconds), "
            "exact once the workers drain; `as_of` is the time of the read."
        ),
        "security": USER,
        "parameters": [
            CODE,
            {"name": "from", "in": "query", "required": False,
             "description": "first UTC day, YYYY-MM-DD; default `to` minus 29 days",
             "schema": {"type": "string", "format": "date"}},
            {"name": "to", "in": "query", "required": False,
             "description": "last UTC day, YYYY-MM-DD; default today",
             "schema": {"type": "string", "format": "date"}},
        ],
        "responses": {
            "200": ok(LinkStatsOut, "the statistics"),
            "401": UNAUTHORIZED,
            "404": NO_LINK,
            "422": problem(f"a date not YYYY-MM-DD, `from` after `to`, or more than {MAX_DAYS} "
                           "days"),
        },
    }, structs=(LinkStatsOut,)),
)  # fmt: skip
