"""The ``link-stats`` projection: visits of each link per UTC day, with what they came from.

Every figure of a stats answer is kept per day, so any range of days can be
answered (sluice/builtin/links/stats/reads.py): visits and bots in
``link_stats_days``; referrers, browsers, countries, OSes and devices in
``link_day_facets``; each owner's links per day in ``link_owner_days`` (the
owner's busiest links of a range). ``link_stats`` keeps the whole-life totals
(``sluice/builtin/links/limits.py`` reads them), and ``link_stats_referrers`` and
``link_stats_browsers`` the whole-life lists of the first release.

Pre-aggregated: a batch's fresh visits are summed in memory and written as
deltas, so a hot link costs one upsert per table per batch, not one per visit.
Unique visitors are exact: ``link_visitors`` holds one row per (link,
visitor) and ``link_day_visitors`` one per (link, UTC day, visitor); a batch
inserts its pairs with ON CONFLICT DO NOTHING and counts only the rows that
were really inserted (RETURNING), which are the first visits. A range's
unique visitors are counted from ``link_day_visitors`` when read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sluice.app import Event, ProjectionContext, Tx, utcnow
from sluice.builtin.links.app import app
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.stats.schema import BATCH_IDS, LINK_STATS_DDL, LINK_STATS_RANGES_DDL

# Rows per multi-row statement: far below SQLite's bound on statement parameters.
_CHUNK = 300
# A visit without a (valid) Referer, or whose country, OS or device cannot be told, is
# stored under this value and answered as null.
UNKNOWN = ""
DIRECT = UNKNOWN
FACETS = ("referrer", "browser", "country", "os", "device")


def utc_day(moment: datetime) -> str:
    return moment.astimezone(UTC).date().isoformat()


@dataclass
class _Batch:
    totals: Counter[str] = field(default_factory=Counter)
    bots: Counter[str] = field(default_factory=Counter)
    days: Counter[tuple[str, str]] = field(default_factory=Counter)
    day_bots: Counter[tuple[str, str]] = field(default_factory=Counter)
    referrers: Counter[tuple[str, str]] = field(default_factory=Counter)  # whole life
    browsers: Counter[tuple[str, str]] = field(default_factory=Counter)  # whole life
    facets: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    visitors: set[tuple[str, str]] = field(default_factory=set)
    day_visitors: set[tuple[str, str, str]] = field(default_factory=set)


def _aggregate(visits: Iterable[LinkVisited]) -> _Batch:
    batch = _Batch()
    for visit in visits:
        code, day = visit.code, utc_day(visit.occurred_at)
        referrer = visit.referrer_host or DIRECT
        batch.totals[code] += 1
        batch.bots[code] += visit.is_bot
        batch.days[(code, day)] += 1
        batch.day_bots[(code, day)] += visit.is_bot
        batch.referrers[(code, referrer)] += 1
        batch.browsers[(code, visit.browser)] += 1
        for facet, value in (
            ("referrer", referrer),
            ("browser", visit.browser),
            ("country", visit.country),
            ("os", visit.os),
            ("device", visit.device),
        ):
            batch.facets[(code, day, facet, value or UNKNOWN)] += 1
        batch.visitors.add((code, visit.visitor))
        batch.day_visitors.add((code, day, visit.visitor))
    return batch


async def _owners(tx: Tx, codes: Sequence[str]) -> dict[str, str]:
    """The owner of each of ``codes`` that is a link (one primary-key read each)."""
    owners: dict[str, str] = {}
    for i in range(0, len(codes), _CHUNK):
        chunk = codes[i : i + _CHUNK]
        rows = await tx.fetchall(
            f"SELECT code, owner_id FROM links WHERE code IN ({', '.join('?' * len(chunk))})",
            chunk,
        )
        owners.update((str(code), str(owner)) for code, owner in rows)
    return owners


TABLES = (
    "link_stats",
    "link_stats_days",
    "link_stats_referrers",
    "link_stats_browsers",
    "link_visitors",
    "link_day_visitors",
    "link_day_facets",
    "link_owner_days",
)

PROJECTION = app.projection(
    "link-stats",
    events=(LinkVisited,),
    # A replay builds the tables as a fresh database gets them, step by step.
    schema=(LINK_STATS_DDL, LINK_STATS_RANGES_DDL, BATCH_IDS),
    tables=TABLES,
    # Each step made these tables before the projection held them: sluice's migrations
    # 6, 24 and 28 (release 2), then the links app's migrations 2, 12 and 14 (release 3).
    replaces=((6,), (24,), (28,)),
    replaces_migrations=((2,), (12,), (14,)),
)


@PROJECTION.apply
async def apply(events: Sequence[Event], tx: Tx, ctx: ProjectionContext) -> None:
    batch = _aggregate(e for e in events if isinstance(e, LinkVisited))
    if not batch.totals:
        return
    new_visitors = Counter(
        str(code)
        for (code,) in await tx.insert_new(
            ctx.table("link_visitors"), ("code", "visitor"), sorted(batch.visitors), "code"
        )
    )
    new_day_visitors = Counter(
        (str(code), str(day))
        for code, day in await tx.insert_new(
            ctx.table("link_day_visitors"),
            ("code", "day", "visitor"),
            sorted(batch.day_visitors),
            "code, day",
        )
    )
    now = utcnow().isoformat()
    await tx.upsert_rows(
        ctx.table("link_stats"),
        ("code", "total", "bots", "unique_visitors", "updated_at"),
        [(c, n, batch.bots[c], new_visitors[c], now) for c, n in sorted(batch.totals.items())],
        keys=("code",),
        add=("total", "bots", "unique_visitors"),
        replace=("updated_at",),
    )
    await tx.upsert_rows(
        ctx.table("link_stats_days"),
        ("code", "day", "visits", "unique_visitors", "bots"),
        [
            (c, d, n, new_day_visitors[(c, d)], batch.day_bots[(c, d)])
            for (c, d), n in sorted(batch.days.items())
        ],
        keys=("code", "day"),
        add=("visits", "unique_visitors", "bots"),
    )
    for table, column, counts in (
        ("link_stats_referrers", "referrer", batch.referrers),
        ("link_stats_browsers", "browser", batch.browsers),
    ):
        await tx.upsert_rows(
            ctx.table(table),
            ("code", column, "visits"),
            [(c, key, n) for (c, key), n in sorted(counts.items())],
            keys=("code", column),
            add=("visits",),
        )
    await tx.upsert_rows(
        ctx.table("link_day_facets"),
        ("code", "day", "facet", "value", "visits"),
        [(*key, n) for key, n in sorted(batch.facets.items())],
        keys=("code", "day", "facet", "value"),
        add=("visits",),
    )
    await _add_owner_days(tx, batch, ctx)


async def _add_owner_days(tx: Tx, batch: _Batch, ctx: ProjectionContext) -> None:
    owners = await _owners(tx, sorted(batch.totals))
    rows = sorted(
        (owners[c], d, c, n, batch.day_bots[(c, d)])
        for (c, d), n in batch.days.items()
        if c in owners  # a code that is no link has no owner to count it for
    )
    if not rows:
        return
    await tx.upsert_rows(
        ctx.table("link_owner_days"),
        ("owner_id", "day", "code", "visits", "bots"),
        rows,
        keys=("owner_id", "day", "code"),
        add=("visits", "bots"),
    )
