"""Reads of the ``link-stats`` projection for any range of UTC days (docs/guides/links.md).

Every figure follows the range: the totals and the days come from
``link_stats_days``, the five lists from ``link_day_facets`` and the unique
visitors from ``link_day_visitors``; one statement reads them all, so they
include the same projection batches. What a read costs, in rows of the
primary-key ranges it visits (no table is scanned):

- a link's statistics: its day rows in the range (at most 366), its facet rows
  (days x distinct values: referrer hosts dominate), and its (day, visitor) rows,
  counted distinct (a link with 1,000 visitors a day read over a year visits
  366,000 index rows, a few hundred ms; the default 30 days a twelfth of it);
- an owner's busiest links: one row per (visited link, day) of the range in
  ``link_owner_days`` (an owner's links without visits cost nothing), then at most
  ``2 x limit`` rows of ``links`` by primary key and the ``links_owner`` index.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from sluice.app import Store
from sluice.builtin.links.stats.projection import FACETS, UNKNOWN

# Most values a stats answer lists per facet (the busiest first).
TOP_ROWS = 100


@dataclass(frozen=True)
class DayStats:
    day: date
    visits: int
    unique_visitors: int


@dataclass(frozen=True)
class LinkStats:
    total: int
    bots: int
    unique_visitors: int
    days: list[DayStats]  # every day of the range, zeros included
    # Per facet (referrer, browser, country, os, device): (value, visits), the busiest
    # first; None: no Referer, or a country, OS or device that could not be told.
    facets: dict[str, list[tuple[str | None, int]]]


_NO_TEXT = "CAST(NULL AS TEXT)"
_RANGE = "code = ? AND day >= ? AND day <= ?"
_STATS = f"""
SELECT 'u', {_NO_TEXT}, COUNT(DISTINCT visitor), 0, 0 FROM link_day_visitors WHERE {_RANGE}
UNION ALL
SELECT 'd', day, visits, unique_visitors, bots FROM link_stats_days WHERE {_RANGE}
UNION ALL
SELECT facet, value, visits, 0, 0 FROM (
 SELECT facet, value, SUM(visits) AS visits,
  ROW_NUMBER() OVER (PARTITION BY facet ORDER BY SUM(visits) DESC, value) AS place
 FROM link_day_facets WHERE {_RANGE} GROUP BY facet, value) AS ranked
WHERE place <= {TOP_ROWS}
"""


async def read_stats(store: Store, code: str, first: date, last: date) -> LinkStats:
    """The statistics of ``code`` over the UTC days ``first..last``."""
    bounds = (code, first.isoformat(), last.isoformat())
    rows = await store.fetchall(_STATS, bounds * 3)
    unique = 0
    days: dict[str, tuple[int, int, int]] = {}
    facets: dict[str, list[tuple[str | None, int]]] = {facet: [] for facet in FACETS}
    for kind, key, a, b, c in rows:
        if kind == "u":
            unique = int(a)
        elif kind == "d":
            days[str(key)] = (int(a), int(b), int(c))
        elif kind in facets:
            facets[kind].append((str(key) if key != UNKNOWN else None, int(a)))
    for listed in facets.values():
        listed.sort(key=lambda pair: (-pair[1], pair[0] or ""))  # one order on both stores
    series = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        visits, uniques, _ = days.get(day.isoformat(), (0, 0, 0))
        series.append(DayStats(day, visits, uniques))
    total = sum(visits for visits, _, _ in days.values())
    bots = sum(day_bots for _, _, day_bots in days.values())
    return LinkStats(total, bots, unique, series, facets)


@dataclass(frozen=True)
class LinkVisits:
    code: str
    url: str
    title: str | None
    visits: int
    bots: int


_VISITED = """
SELECT links.code, links.url, links.title, ranked.visits, ranked.bots FROM (
 SELECT code, SUM(visits) AS visits, SUM(bots) AS bots FROM link_owner_days
 WHERE owner_id = ? AND day >= ? AND day <= ? GROUP BY code
 ORDER BY SUM(visits) DESC, code LIMIT ?) AS ranked
JOIN links ON links.code = ranked.code AND links.owner_id = ?
"""
_NEWEST = (
    "SELECT code, url, title FROM links WHERE owner_id = ? ORDER BY created_at DESC, code LIMIT ?"
)


async def read_top_links(
    store: Store, owner_id: str, first: date, last: date, limit: int
) -> list[LinkVisits]:
    """Up to ``limit`` of the owner's links, by visits over ``first..last`` (most first);
    when fewer were visited, the newest links without visits follow, with zeros."""
    rows = await store.fetchall(
        _VISITED, (owner_id, first.isoformat(), last.isoformat(), limit, owner_id)
    )
    top = [
        LinkVisits(str(code), str(url), title, int(visits), int(bots))
        for code, url, title, visits, bots in rows
    ]
    top.sort(key=lambda link: (-link.visits, link.code))
    if len(top) < limit:
        listed = {link.code for link in top}
        for code, url, title in await store.fetchall(_NEWEST, (owner_id, limit + len(top))):
            if len(top) < limit and code not in listed:
                top.append(LinkVisits(str(code), str(url), title, 0, 0))
    return top
