"""The ``article-views`` projection: view totals and day/week/month leaderboards.

A hot article gets one UPDATE per batch, not one per view: a batch's fresh
events are summed in memory and written as deltas. Leaderboards live in Redis
sorted sets written with absolute counts (``ZADD GT``), so writing them again
after a crash or from two workers is harmless; SQLite stays the source of truth.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
from redis.asyncio import Redis

from sluice.app import Event, ProjectionContext, Resources, Store, Tx, utcnow
from sluice.app.advanced import Keys
from sluice.builtin.articles.app import app
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.articles.keys import ArticlesKeys
from sluice.builtin.articles.periods import PERIODS, _period_end, _starts, period_start

_KEY_TTL = {"day": timedelta(days=8), "week": timedelta(days=15), "month": timedelta(days=62)}


def _views_by_day(events: Sequence[Event], zone: ZoneInfo) -> Counter[tuple[date, str]]:
    """Views per (local day, article): one zone conversion and one count per event."""
    days: Counter[tuple[date, str]] = Counter()
    for event in events:
        if isinstance(event, ArticleViewed):
            days[(event.occurred_at.astimezone(zone).date(), event.article_id)] += 1
    return days


class _View(msgspec.Struct, gc=False):
    """What a rebuild reads of an ``ArticleViewed`` payload (other fields are skipped).
    Two strings cannot make a cycle: untracked by the garbage collector, a million of
    them decode about a sixth faster."""

    article_id: str
    occurred_at: str


_views = msgspec.json.Decoder(list[_View])


def _payload_views_by_day(payloads: bytes | str, zone: ZoneInfo) -> Counter[tuple[date, str]]:
    """``_views_by_day`` of ``ArticleViewed`` payloads (one JSON array of them), without
    making their events: the article and the time are decoded alone, in one call, and
    the local day is worked out once per UTC minute (every zone's offset is whole
    minutes)."""
    views = _views.decode(payloads)
    local: dict[str, date] = {}
    days: list[date] = []
    for view in views:
        at = view.occurred_at
        if at[-1:] == "Z":
            minute = at[:16]
            day = local.get(minute)
            if day is None:
                moment = datetime.fromisoformat(minute + ":00+00:00")
                day = local[minute] = moment.astimezone(zone).date()
        else:  # written with another offset: the slow way
            day = datetime.fromisoformat(at).astimezone(zone).date()
        days.append(day)
    return Counter(zip(days, [view.article_id for view in views], strict=True))


# The tables, as migrations 2 and 28 of sluice's history made them before the app held
# them (the processed table among them, with its batch_id added by the second step).
ARTICLE_VIEWS_DDL = """
CREATE TABLE article_views{s} (
    article_id TEXT PRIMARY KEY,
    views INTEGER NOT NULL,
    updated_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE article_view_periods{s} (
    period TEXT NOT NULL,
    start TEXT NOT NULL,
    article_id TEXT NOT NULL,
    views INTEGER NOT NULL,
    PRIMARY KEY (period, start, article_id)
) WITHOUT ROWID;
CREATE INDEX article_view_periods_rank{s} ON article_view_periods{s} (period, start, views DESC);
CREATE TABLE article_views_processed{s} (
    event_id TEXT PRIMARY KEY
) WITHOUT ROWID;
"""
BATCH_IDS = "ALTER TABLE article_views_processed{s} ADD COLUMN batch_id INTEGER;\n"

PROJECTION = app.projection(
    "article-views",
    events=(ArticleViewed,),
    schema=(ARTICLE_VIEWS_DDL, BATCH_IDS),
    tables=("article_views", "article_view_periods"),
    replaces=((2,), (28,)),
)


@PROJECTION.apply
async def apply(events: Sequence[Event], tx: Tx, ctx: ProjectionContext) -> None:
    await _write(tx, _views_by_day(events, ctx.config.zone), ctx)


@PROJECTION.apply_payloads
async def apply_payloads(payloads: bytes | str, tx: Tx, ctx: ProjectionContext) -> None:
    await _write(tx, _payload_views_by_day(payloads, ctx.config.zone), ctx)


async def _write(tx: Tx, days: Counter[tuple[date, str]], ctx: ProjectionContext) -> None:
    """Add the views per (local day, article) to the totals and the period counts."""
    if not days:
        return
    totals: Counter[str] = Counter()
    periods: Counter[tuple[str, str, str]] = Counter()
    for (local, article), n in days.items():
        totals[article] += n
        for period, start in zip(PERIODS, _starts(local), strict=True):
            periods[(period, start, article)] += n
    now = utcnow().isoformat()
    await tx.upsert_rows(
        ctx.table("article_views"),
        ("article_id", "views", "updated_at"),
        sorted((article, n, now) for article, n in totals.items()),
        keys=("article_id",),
        add=("views",),
        replace=("updated_at",),
    )
    await tx.upsert_rows(
        ctx.table("article_view_periods"),
        ("period", "start", "article_id", "views"),
        sorted((*key, n) for key, n in periods.items()),
        keys=("period", "start", "article_id"),
        add=("views",),
    )


def _leaderboard_expiry(period: str, start: date, zone: ZoneInfo) -> int:
    end = datetime.combine(_period_end(period, start), datetime.min.time(), zone)
    return int((end + _KEY_TTL[period]).timestamp())


@PROJECTION.publish
async def publish(events: Sequence[Event], resources: Resources) -> None:
    """Copy the absolute period counts of the touched articles into the sorted sets,
    read for every period the batch touched in one query (a primary-key lookup each)."""
    zone = resources.config.zone
    touched: dict[tuple[str, str], set[str]] = {}
    for local, article in _views_by_day(events, zone):
        for period, start in zip(PERIODS, _starts(local), strict=True):
            touched.setdefault((period, start), set()).add(article)
    now = utcnow().timestamp()
    selects: list[str] = []
    params: list[str] = []
    expiry: dict[tuple[str, str], int] = {}
    for (period, start), articles in touched.items():
        expire_at = _leaderboard_expiry(period, date.fromisoformat(start), zone)
        if expire_at <= now:
            continue
        expiry[period, start] = expire_at
        selects.append(
            "SELECT period, start, article_id, views FROM article_view_periods"
            f" WHERE period = ? AND start = ? AND article_id IN ({', '.join('?' * len(articles))})"
        )
        params += [period, start, *sorted(articles)]
    if not selects:
        return
    boards: dict[tuple[str, str], dict[str, int]] = {}
    for period, start, article, views in await resources.store.fetchall(
        " UNION ALL ".join(selects), params
    ):
        boards.setdefault((str(period), str(start)), {})[str(article)] = int(views)
    pipe = resources.redis.pipeline(transaction=False)
    for (period, start), members in boards.items():
        key = ArticlesKeys(resources.keys.prefix).top(period, start)
        pipe.zadd(key, members, gt=True)
        pipe.expireat(key, expiry[period, start])
    if len(pipe):
        await pipe.execute()


# Replaces a leaderboard at once. A script, not a MULTI: redis-py 8.1's cluster
# transaction runs each queued command on a thread of its own with a loop of its own,
# blocking the caller and leaving connections bound to a loop that is gone.
_REPLACE = """
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 1000 do
    redis.call('ZADD', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if #ARGV > 1 then redis.call('EXPIREAT', KEYS[1], ARGV[1]) end
"""


@PROJECTION.republish
async def republish(resources: Resources) -> None:
    """Rewrite the current periods' sorted sets from the rebuilt tables."""
    now = utcnow()
    zone = resources.config.zone
    for period in PERIODS:
        start = period_start(period, now, zone)
        rows = await resources.store.fetchall(
            "SELECT article_id, views FROM article_view_periods WHERE period = ? AND start = ?",
            (period, start.isoformat()),
        )
        key = ArticlesKeys(resources.keys.prefix).top(period, start.isoformat())
        expire_at = _leaderboard_expiry(period, start, zone)
        members = [part for article, views in rows for part in (views, article)]
        await resources.redis.eval(_REPLACE, 1, key, expire_at, *members)


# Reads used by the HTTP views.


async def views_of(store: Store, article_id: str) -> int:
    row = await store.fetchone(
        "SELECT views FROM article_views WHERE article_id = ?", (article_id,)
    )
    return int(row[0]) if row else 0


async def top_from_store(
    store: Store, period: str, start: date, limit: int
) -> list[tuple[str, int]]:
    rows = await store.fetchall(
        "SELECT article_id, views FROM article_view_periods WHERE period = ? AND start = ?"
        " ORDER BY views DESC, article_id LIMIT ?",
        (period, start.isoformat(), limit),
    )
    return [(str(a), int(v)) for a, v in rows]


async def top_from_redis(
    redis: Redis, keys: Keys, period: str, start: date, limit: int
) -> list[tuple[str, int]] | None:
    """The leaderboard from Redis, or None when its sorted set does not exist."""
    key = ArticlesKeys(keys.prefix).top(period, start.isoformat())
    rows: Any = await redis.zrevrange(key, 0, limit - 1, withscores=True)
    if not rows:
        return None
    ranked = [(member.decode(), int(score)) for member, score in rows]
    if len(ranked) == limit:
        # ZREVRANGE puts equal scores in descending member order; ties rank by ascending
        # article id, as in top_from_store, so the last places go to the smallest ids
        # among everything tied with the last score.
        last = ranked[-1][1]
        tied: Any = await redis.zrangebyscore(key, last, last, start=0, num=limit)
        ranked = [r for r in ranked if r[1] > last] + [(m.decode(), last) for m in tied]
    ranked.sort(key=lambda item: (-item[1], item[0]))
    return ranked[:limit]
