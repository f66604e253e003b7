"""``GET /v1/admin/orphan-visits``: requests for unknown codes, per day and the top codes
(admin token), and the counter the redirect feeds (sluice/builtin/links/orphans.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date

import msgspec
from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    Route,
    json_response,
    ok,
    problem,
    require_admin,
    store,
    utcnow,
)
from sluice.builtin.links.http.keys import ORPHANS
from sluice.builtin.links.http.link_stats import RANGE, RANGE_422, stats_range
from sluice.builtin.links.orphan_report import TOP_CODES, read_orphans
from sluice.builtin.links.orphans import OrphanTally
from sluice.builtin.links.settings import LinksSettings


class OrphanDay(msgspec.Struct, kw_only=True):
    date: date
    visits: int


class OrphanCode(msgspec.Struct, kw_only=True):
    code: str
    visits: int


class OrphanVisits(msgspec.Struct, kw_only=True):
    """GETs of codes no link has, in the UTC days ``from``..``to``."""

    from_: date = msgspec.field(name="from")
    to: date
    total: int
    days: list[OrphanDay]
    codes: list[OrphanCode]
    other: int


async def orphan_visits(request: web.Request) -> web.Response:
    await require_admin(request)
    first, last = stats_range(request.query, utcnow().astimezone(UTC).date())
    # This process's tally first: what it just answered 404 shows at once.
    await request.app[ORPHANS].flush()
    report = await read_orphans(store(request), first, last)
    return json_response(
        OrphanVisits(
            from_=first,
            to=last,
            total=report.total,
            days=[OrphanDay(date=day, visits=visits) for day, visits in report.days],
            codes=[OrphanCode(code=code, visits=visits) for code, visits in report.codes],
            other=report.other,
        )
    )


async def count_orphans(app: web.Application) -> AsyncIterator[None]:
    """The orphan visit counter and its writer; on shutdown it writes what is counted."""
    settings = LinksSettings.of(app)
    tally = OrphanTally(
        store(app),
        codes_per_day=settings.orphan_codes_per_day,
        retention_days=settings.orphan_retention_days,
        interval=settings.orphan_flush_ms / 1000,
    )
    app[ORPHANS] = tally
    tally.start()
    try:
        yield
    finally:
        await tally.close()


ROUTES = (
    Route(
        "GET",
        "/v1/admin/orphan-visits",
        orphan_visits,
        {
            "operationId": "adminOrphanVisits",
            "summary": "Requests for unknown codes: per day and the top codes",
            "description": (
                "GET requests of `/{code}` for a code no link has (a code of the short-code "
                "shape; HEAD is not counted; a disabled, expired or not yet valid link is not "
                "unknown). `days` lists every UTC day from `from` to `to`, zeros included; "
                "`total` is their sum; `codes` the busiest unknown codes of the range (at most "
                f"{TOP_CODES}). Each UTC day stores at most SLUICE_ORPHAN_CODES_PER_DAY (1000) "
                "codes; the visits of codes beyond them count in `other`, so once a day "
                "reached its cap (a flood of random codes) its codes are approximate while "
                "its visits stay exact. Days older than SLUICE_ORPHAN_RETENTION_DAYS (90) are "
                "deleted. Each API process writes its counts every SLUICE_ORPHAN_FLUSH_MS "
                "(1000) ms, the one answering right before it reads."
            ),
            "security": ADMIN,
            "parameters": RANGE,
            "responses": {
                "200": ok(OrphanVisits, "the orphan visits of the range"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "422": problem(RANGE_422),
            },
        },
        structs=(OrphanVisits,),
    ),
)
