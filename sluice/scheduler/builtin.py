"""The built-in tasks (docs/concepts/scheduler.md), each on a schedule from the config."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime

from sluice.config import Config
from sluice.events import utcnow
from sluice.history import archive
from sluice.records import deliveries
from sluice.records.maintenance import (
    all_streams,
    passed_by_every_group,
    reap_consumers,
    trim_stream,
)
from sluice.relay.relay import POSITION
from sluice.scheduler.task_spec import F, Task, TaskContext, TaskDeclaration, declare_task
from sluice.store import Store
from sluice.store.users import db_time

# A consumer idle this long with nothing pending belongs to a worker that is gone:
# a live worker touches its consumer with every blocking read (seconds).
REAP_IDLE_MS = 60 * 60 * 1000
PURGE_BATCH = 1000

# An app's purge (``@app.purge``): what it deleted past any use, by kind.
Purge = Callable[[Store, datetime], Awaitable[Mapping[str, int]]]

# sluice's own tasks, declared as an app declares its own (``@app.task``), in this order;
# each on the schedule of its settings SLUICE_<NAME>_CRON and SLUICE_<NAME>_TIMEZONE (the
# deployment's SLUICE_TIMEZONE when that is empty).
BUILTIN: dict[str, TaskDeclaration] = {}


def _task(name: str, description: str) -> Callable[[F], F]:
    field = name.replace("-", "_")
    return declare_task(
        BUILTIN,
        name,
        description=description,
        cron=lambda config: str(getattr(config, f"{field}_cron")),
        timezone=lambda config: str(getattr(config, f"{field}_timezone")),
    )


@_task(
    "trim-streams",
    "trims stream entries every group has acked, older than SLUICE_STREAM_RETENTION",
)
async def trim_streams(ctx: TaskContext) -> None:
    """Trim each stream in turn (never below what a group has not acked).

    A batch task: the cursor is the last stream trimmed, so a run that dies midway
    resumes with the next stream.
    """
    redis, keys = ctx.resources.redis, ctx.resources.keys
    retention = ctx.resources.config.stream_retention
    removed = 0
    for stream in sorted(await all_streams(redis, keys)):
        if ctx.cursor is not None and stream <= ctx.cursor:
            continue
        removed += await trim_stream(redis, stream, retention) or 0
        await ctx.checkpoint(stream)
    ctx.log.info("streams trimmed", entries_removed=removed)


@_task("reap-consumers", "removes consumers idle for an hour with nothing pending")
async def reap_idle_consumers(ctx: TaskContext) -> None:
    reaped = await reap_consumers(ctx.resources.redis, ctx.resources.keys, REAP_IDLE_MS)
    ctx.log.info("idle consumers reaped", consumers=reaped)


@_task(
    "purge-expired",
    "deletes expired user tokens, and what the apps purge (reminder occurrences older than 7 days)",
)
async def purge_expired(ctx: TaskContext, purges: Sequence[Purge] = ()) -> None:
    """Delete expired user tokens, then what each of the apps' ``purges`` finds past any
    use (the reminders app: occurrence rows older than a week).
    1000 tokens per transaction, a checkpoint after each: the cursor is
    ``tokens:<last hash>`` while tokens are purged, then the name of the app's purge
    function that runs (the reminders app's ``occurrences``); the apps' purges are
    idempotent, and all run again by a run that resumes past the tokens.
    """
    store = ctx.resources.store
    now = utcnow()
    cursor = ctx.cursor or "tokens:"
    tokens = 0
    while cursor.startswith("tokens:"):
        rows = await store.fetchall(
            "SELECT token_hash FROM tokens WHERE token_hash > ? AND expires_at < ?"
            " ORDER BY token_hash LIMIT ?",
            (cursor.removeprefix("tokens:"), db_time(now), PURGE_BATCH),
        )
        if not rows:
            cursor = "apps"  # past the tokens
            break
        hashes = [str(row[0]) for row in rows]
        async with store.transaction() as tx:
            tokens += await tx.execute(
                f"DELETE FROM tokens WHERE token_hash IN ({', '.join('?' for _ in hashes)})",
                hashes,
            )
        cursor = f"tokens:{hashes[-1]}"
        await ctx.checkpoint(cursor)
    await ctx.checkpoint(cursor)
    purged: dict[str, int] = {}
    for purge in purges:
        await ctx.checkpoint(purge.__name__)
        purged.update(await purge(store, now))
    ctx.log.info("expired records purged", tokens=tokens, **purged)


@_task("purge-deliveries", "deletes delivery records older than SLUICE_DELIVERY_RETENTION")
async def purge_deliveries(ctx: TaskContext) -> None:
    """Delete delivery records older than SLUICE_DELIVERY_RETENTION (oldest first)."""
    retention = ctx.resources.config.delivery_retention
    removed = await deliveries.purge(ctx.resources.store, utcnow(), retention)
    ctx.log.info("deliveries purged", removed=removed, retention_s=retention)


@_task(
    "archive-history",
    "moves published events older than SLUICE_HISTORY_HOT_DAYS into archive segments",
)
async def archive_history(ctx: TaskContext) -> None:
    """Move published events older than SLUICE_HISTORY_HOT_DAYS into archive segments.

    Scheduled every hour at minute 17 (``0 17 * * * *``): hourly keeps each run's
    work to about an hour of traffic crossing the hot window (and the table within an
    hour of its bound), and minute 17 keeps it off the quarter-hour minutes where
    purge-exports and trim-streams already run. Needs no cursor: each segment commits
    with the delete of its events, so a run that dies midway leaves the rest in the
    table for the next; a checkpoint after each segment records progress and stops
    a run whose lock was lost.
    """
    store = ctx.resources.store
    config = ctx.resources.config
    hot_days = config.history_hot_days
    bounds = await archive.limits(
        store,
        utcnow(),
        hot_days,
        await store.position(POSITION),
        await passed_by_every_group(ctx.resources.redis, ctx.resources.keys),
        segment_events=config.history_segment_events,
        min_events=max(1, config.history_segment_events // 10),
    )

    async def moved_one(segment: archive.Moved) -> None:
        await ctx.checkpoint(f"{segment.aggregate}:{segment.last_seq}")

    moved = await archive.archive(store, bounds, after_segment=moved_one)
    ctx.log.info(
        "history archived",
        segments=len(moved),
        events=sum(m.events for m in moved),
        bytes=sum(m.bytes for m in moved),
        hot_days=hot_days,
        upto_seq=bounds.upto,
    )


def builtin_tasks(config: Config, purges: Sequence[Purge] = ()) -> list[Task]:
    """sluice's own tasks, on their settings' schedules; ``purge-expired`` runs the apps'
    ``purges`` too."""
    tasks = []
    for declared in BUILTIN.values():
        if declared.run is purge_expired:
            run = functools.partial(purge_expired, purges=tuple(purges))
            declared = dataclasses.replace(declared, run=run)
        cron, zone = declared.schedule_of(config)
        settings = f"SLUICE_{declared.name.replace('-', '_').upper()}_CRON / _TIMEZONE"
        tasks.append(declared.task(config, f"{settings} ({cron!r}, {zone!r})"))
    return tasks
