"""The ``articles`` app's task: each day's top 100, kept after the day's leaderboard expires."""

from __future__ import annotations

from datetime import date, timedelta

from sluice.app import Config, TaskContext, db_time, utcnow
from sluice.builtin.articles.app import app
from sluice.builtin.articles.projection import top_from_store
from sluice.builtin.articles.settings import ArticlesSettings

SNAPSHOT_SIZE = 100

# The leaderboard snapshot's tables, as migration 7 of sluice's history made them.
app.migration(
    1,
    "leaderboard snapshots",
    """
    CREATE TABLE leaderboard_snapshots (
        day TEXT NOT NULL,
        rank INTEGER NOT NULL,
        article_id TEXT NOT NULL,
        views INTEGER NOT NULL,
        taken_at TEXT NOT NULL,
        PRIMARY KEY (day, rank)
    ) WITHOUT ROWID;
    """,
    replaces=(7,),
)


def _cron(config: Config) -> str:
    return ArticlesSettings.of(config).snapshot_leaderboard_cron


def _zone(config: Config) -> str:
    return ArticlesSettings.of(config).snapshot_leaderboard_timezone or config.timezone


def snapshot_day(ctx: TaskContext) -> date:
    """Yesterday in SLUICE_TIMEZONE, relative to the occurrence (or the manual run)."""
    zone = ctx.resources.config.zone
    return ctx.run.scheduled_for.astimezone(zone).date() - timedelta(days=1)


@app.task(
    "snapshot-leaderboard",
    cron=_cron,
    timezone=_zone,
    description="stores yesterday's top 100 articles (GET /v1/articles/top/{date})",
)
async def snapshot_leaderboard(ctx: TaskContext) -> None:
    """Store the day's top 100 articles; running it again replaces the same snapshot."""
    store = ctx.resources.store
    day = snapshot_day(ctx)
    rows = await top_from_store(store, "day", day, SNAPSHOT_SIZE)
    taken_at = db_time(utcnow())
    async with store.transaction() as tx:
        await tx.execute("DELETE FROM leaderboard_snapshots WHERE day = ?", (day.isoformat(),))
        await tx.executemany(
            "INSERT INTO leaderboard_snapshots (day, rank, article_id, views, taken_at)"
            " VALUES (?, ?, ?, ?, ?)",
            [
                (day.isoformat(), rank, article, views, taken_at)
                for rank, (article, views) in enumerate(rows, start=1)
            ],
        )
    ctx.log.info("leaderboard snapshot stored", day=day.isoformat(), articles=len(rows))
