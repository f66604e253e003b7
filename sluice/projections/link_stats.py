"""The ``link-stats`` projection: visit totals, days, referrers, browsers, unique visitors.

Pre-aggregated: a batch's fresh visits are summed in memory and written as
deltas, so a hot link costs one UPDATE per table per batch, not one per visit.
Unique visitors are exact: ``link_visitors`` holds one row per (link,
visitor) and ``link_day_visitors`` one per (link, UTC day, visitor); a batch
inserts its pairs with ON CONFLICT DO NOTHING and counts only the rows that
were really inserted (RETURNING), which are the first visits. The reads never
touch the events table or those visitor tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sluice.config import Config
from sluice.events import AnyEvent, LinkVisited, utcnow
from sluice.projections.base import Projection
from sluice.store import Store, Tx
from sluice.store.migrations import LINK_STATS_DDL

# Rows per multi-row INSERT: far below SQLite's bound on statement parameters.
_CHUNK = 300
# Most referrers and browsers a stats answer lists (the busiest first).
TOP_ROWS = 100
# A visit without a (valid) Referer is stored under this name and answered as null.
DIRECT = ""


def utc_day(moment: datetime) -> str:
    return moment.astimezone(UTC).date().isoformat()


@dataclass
class _Batch:
    totals: Counter[str]
    bots: Counter[str]
    days: Counter[tuple[str, str]]
    referrers: Counter[tuple[str, str]]
    browsers: Counter[tuple[str, str]]
    visitors: set[tuple[str, str]]
    day_visitors: set[tuple[str, str, str]]


def _aggregate(visits: Iterable[LinkVisited]) -> _Batch:
    batch = _Batch(Counter(), Counter(), Counter(), Counter(), Counter(), set(), set())
    for visit in visits:
        code, day = visit.code, utc_day(visit.occurred_at)
        batch.totals[code] += 1
        batch.bots[code] += visit.is_bot
        batch.days[(code, day)] += 1
        batch.referrers[(code, visit.referrer_host or DIRECT)] += 1
        batch.browsers[(code, visit.browser)] += 1
        batch.visitors.add((code, visit.visitor))
        batch.day_visitors.add((code, day, visit.visitor))
    return batch


async def _insert_new(
    tx: Tx, table: str, columns: Sequence[str], returning: str, rows: Sequence[Any]
) -> list[Any]:
    """Insert the ``rows`` not in ``table`` yet; returns ``returning`` of each row inserted."""
    names = ", ".join(columns)
    inserted: list[Any] = []
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i : i + _CHUNK]
        values = ", ".join([f"({', '.join('?' * len(columns))})"] * len(chunk))
        inserted.extend(
            await tx.fetchall(
                f"INSERT INTO {table} ({names}) VALUES {values}"
                f" ON CONFLICT ({names}) DO NOTHING RETURNING {returning}",
                [value for row in chunk for value in row],
            )
        )
    return inserted


async def apply(tx: Tx, events: Sequence[AnyEvent], s: str, config: Config) -> None:
    batch = _aggregate(e for e in events if isinstance(e, LinkVisited))
    if not batch.totals:
        return
    new_visitors = Counter(
        str(code)
        for (code,) in await _insert_new(
            tx, f"link_visitors{s}", ("code", "visitor"), "code", sorted(batch.visitors)
        )
    )
    new_day_visitors = Counter(
        (str(code), str(day))
        for code, day in await _insert_new(
            tx,
            f"link_day_visitors{s}",
            ("code", "day", "visitor"),
            "code, day",
            sorted(batch.day_visitors),
        )
    )
    now = utcnow().isoformat()
    await tx.executemany(
        f"INSERT INTO link_stats{s} (code, total, bots, unique_visitors, updated_at)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (code) DO UPDATE SET"
        f" total = link_stats{s}.total + excluded.total, bots = link_stats{s}.bots + excluded.bots,"
        f" unique_visitors = link_stats{s}.unique_visitors + excluded.unique_visitors,"
        " updated_at = excluded.updated_at",
        [(c, n, batch.bots[c], new_visitors[c], now) for c, n in batch.totals.items()],
    )
    await tx.executemany(
        f"INSERT INTO link_stats_days{s} (code, day, visits, unique_visitors) VALUES (?, ?, ?, ?)"
        f" ON CONFLICT (code, day) DO UPDATE SET visits = link_stats_days{s}.visits"
        f" + excluded.visits, unique_visitors = link_stats_days{s}.unique_visitors"
        " + excluded.unique_visitors",
        [(c, d, n, new_day_visitors[(c, d)]) for (c, d), n in batch.days.items()],
    )
    for table, column, counts in (
        ("link_stats_referrers", "referrer", batch.referrers),
        ("link_stats_browsers", "browser", batch.browsers),
    ):
        await tx.executemany(
            f"INSERT INTO {table}{s} (code, {column}, visits) VALUES (?, ?, ?)"
            f" ON CONFLICT (code, {column}) DO UPDATE"
            f" SET visits = {table}{s}.visits + excluded.visits",
            [(c, key, n) for (c, key), n in counts.items()],
        )


TABLES = (
    "link_stats", "link_stats_days", "link_stats_referrers", "link_stats_browsers",
    "link_visitors", "link_day_visitors", "link_stats_processed",
)  # fmt: skip

PROJECTION = Projection(
    name="link-stats",
    aggregates=("visits",),
    event_types=("LinkVisited",),
    ddl=LINK_STATS_DDL,
    tables=TABLES,
    apply=apply,
)


# Reads used by the HTTP view.


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
    referrers: list[tuple[str | None, int]]  # None: no Referer
    browsers: list[tuple[str, int]]


# One statement, so one consistent snapshot: the totals, the days, the
# referrers and the browsers all include the same batches.
_NO_TEXT = "CAST(NULL AS TEXT)"
_NO_NUMBER = "CAST(NULL AS INTEGER)"
_STATS = f"""
SELECT 't', {_NO_TEXT}, total, bots, unique_visitors FROM link_stats WHERE code = ?
UNION ALL
SELECT 'd', day, visits, unique_visitors, {_NO_NUMBER} FROM link_stats_days
 WHERE code = ? AND day >= ? AND day <= ?
UNION ALL
SELECT * FROM (SELECT 'r', referrer, visits, {_NO_NUMBER}, {_NO_NUMBER}
 FROM link_stats_referrers WHERE code = ? ORDER BY visits DESC, referrer LIMIT {TOP_ROWS}) AS r
UNION ALL
SELECT * FROM (SELECT 'b', browser, visits, {_NO_NUMBER}, {_NO_NUMBER}
 FROM link_stats_browsers WHERE code = ? ORDER BY visits DESC, browser LIMIT {TOP_ROWS}) AS b
"""


async def read_stats(store: Store, code: str, first: date, last: date) -> LinkStats:
    """All-time totals, referrers and browsers of ``code``, and its days ``first..last``."""
    rows = await store.fetchall(
        _STATS, (code, code, first.isoformat(), last.isoformat(), code, code)
    )
    total = bots = unique = 0
    days: dict[str, tuple[int, int]] = {}
    referrers: list[tuple[str | None, int]] = []
    browsers: list[tuple[str, int]] = []
    for kind, key, a, b, c in rows:
        if kind == "t":
            total, bots, unique = int(a), int(b), int(c)
        elif kind == "d":
            days[str(key)] = (int(a), int(b))
        elif kind == "r":
            referrers.append((str(key) or None, int(a)))
        else:
            browsers.append((str(key), int(a)))
    series = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        visits, uniques = days.get(day.isoformat(), (0, 0))
        series.append(DayStats(day, visits, uniques))
    return LinkStats(total, bots, unique, series, referrers, browsers)
