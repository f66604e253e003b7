"""Helpers for the fault-injection tests: what Redis and the database really hold.

Every fault test ends the same way: wait until the system has settled (the
relay published every committed event, every entry of the group's streams
was delivered and acked, nothing waits for a retry), then assert the exact
view count. ``settle`` does that and, when the system never settles, fails
with what is missing instead of a bare timeout.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sluice.app.testing import patience, wait_for
from sluice.builtin.articles.events import ArticleViewed
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from tests.integration.helpers import post_views, views

GROUP = "article-views"


async def stream_event_ids(redis: aioredis.Redis, stream: str) -> list[str]:
    """The ``event_id`` of every entry of ``stream``, in stream order (duplicates kept)."""
    entries: Any = await redis.xrange(stream)
    return [fields[b"event_id"].decode() for _, fields in entries]


async def committed_event_ids(resources: Resources, aggregate: str = "articles") -> set[str]:
    rows = await resources.store.fetchall(
        "SELECT event_id FROM events WHERE aggregate = ?", (aggregate,)
    )
    return {str(r[0]) for r in rows}


async def pending_of(redis: aioredis.Redis, stream: str, consumer: str, group: str = GROUP) -> int:
    """How many entries of ``stream`` are pending for ``consumer`` in ``group`` (XPENDING)."""
    try:
        summary = await redis.xpending(stream, group)
    except ResponseError:  # no such stream or group yet
        return 0
    for row in summary.get("consumers") or []:
        name = row["name"].decode() if isinstance(row["name"], bytes) else row["name"]
        if name == consumer:
            return int(row["pending"])
    return 0


async def _group_state(redis: aioredis.Redis, stream: str, group: str) -> tuple[int, bool]:
    """(pending, caught up) of ``group`` on ``stream``; a missing stream is settled."""
    if not await redis.exists(stream):
        return 0, True
    info = await redis.xinfo_stream(stream)
    last = info["last-generated-id"]
    for row in await redis.xinfo_groups(stream):
        name = row["name"].decode() if isinstance(row["name"], bytes) else row["name"]
        if name == group:
            return int(row["pending"]), row["last-delivered-id"] == last
    return 0, info["length"] == 0


@dataclass
class Snapshot:
    committed: int
    position: int
    missing: int  # committed event ids absent from the stream
    entries: int  # stream entries (duplicates included)
    pending: int
    caught_up: bool
    delayed: int
    dead: int
    views: int

    @property
    def settled(self) -> bool:
        return (
            self.position >= self.committed
            and self.missing == 0
            and self.pending == 0
            and self.caught_up
            and self.delayed == 0
        )


async def snapshot(
    resources: Resources, redis: aioredis.Redis, article_id: str, group: str = GROUP
) -> Snapshot:
    keys = resources.keys
    committed = await committed_event_ids(resources)
    # The position first: a batch it counts was in the streams before they are read,
    # so a settled snapshot cannot see the position of entries it did not count.
    position = await resources.store.position(POSITION)
    published = [
        event_id
        for partition in keys.numbers
        for event_id in await stream_event_ids(redis, keys.stream("articles", partition))
    ]
    pending = 0
    caught_up = True
    for partition in keys.numbers:
        for stream in (keys.stream("articles", partition), keys.retry(group, partition)):
            p, c = await _group_state(redis, stream, group)
            pending += p
            caught_up = caught_up and c
    delayed = dead = 0
    for partition in keys.numbers:
        delayed += int(await redis.zcard(keys.delayed(group, partition)))
        dead += int(await redis.xlen(keys.dead(group, partition)))
    return Snapshot(
        committed=len(committed),
        position=position,
        missing=len(committed - set(published)),
        entries=len(published),
        pending=pending,
        caught_up=caught_up,
        delayed=delayed,
        dead=dead,
        views=await views(resources, article_id),
    )


async def settle(
    resources: Resources,
    redis: aioredis.Redis,
    article_id: str,
    expected: int,
    *,
    timeout: float = 25.0,
) -> Snapshot:
    """Wait until everything is published and consumed, then assert the exact count.

    Settled means: the relay's position reached the last committed event,
    every committed event id is in the stream, the group has read every entry
    and has none pending, and no retry waits. The count is asserted only
    then, so an over-count cannot slip through while it is still growing.
    """
    deadline = time.monotonic() + patience(timeout)
    state: Snapshot | None = None
    while time.monotonic() < deadline:
        try:
            state = await snapshot(resources, redis, article_id)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            state = None
        if state is not None and state.settled:
            break
        await asyncio.sleep(0.05)
    assert state is not None, "Redis never answered"
    assert state.settled, f"never settled within {timeout} s (x the load): {state}"
    assert state.dead == 0, f"dead letters: {state}"
    assert state.views == expected, f"expected exactly {expected} views: {state}"
    return state


def aof_file(server: RedisServer) -> Path:
    """The AOF file Redis appends to: ``appendonlydir/*.incr.aof`` (7.x) or ``appendonly.aof``."""
    incr = sorted(
        (server.data_dir / "appendonlydir").glob("*.incr.aof"),
        key=lambda p: int(p.name.split(".")[-3]),
    )
    if incr:
        return incr[-1]
    single = server.data_dir / "appendonly.aof"
    assert single.exists(), f"no AOF under {server.data_dir}"
    return single


async def crash_losing_aof_tail(
    server: RedisServer, keep_bytes: int, *clients: aioredis.Redis
) -> None:
    """SIGKILL Redis, cut its AOF back to ``keep_bytes`` and start it again.

    This is what ``appendfsync everysec`` leaves after a machine crash: the
    file holds a prefix of the writes, up to a second short. A plain SIGKILL
    of the process loses nothing on Linux (written pages survive in the page
    cache), so the tail is cut explicitly to make the loss certain.
    The dead pooled connections of ``clients`` are dropped afterwards.
    """

    def crash() -> None:
        server.kill()
        with aof_file(server).open("r+b") as f:
            f.truncate(keep_bytes)
        server.start()

    await asyncio.to_thread(crash)
    for client in clients:
        await client.connection_pool.disconnect()


async def commit_views_at_once(
    resources: Resources, article_id: str, n: int, *, start: int
) -> None:
    """Commit ``n`` views in one transaction: a burst the relay needs many batches for."""
    async with resources.store.transaction() as tx:
        await tx.append(
            *(
                ArticleViewed(article_id=article_id, viewer=f"viewer-{i}")
                for i in range(start, start + n)
            )
        )


class Trickle:
    """Views committed one by one, as the API does, until stopped; counts them."""

    def __init__(self, resources: Resources, article_id: str, *, start: int = 0) -> None:
        self.resources = resources
        self.article_id = article_id
        self.start = start
        self.committed = 0
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            await post_views(self.resources, self.article_id, 1, start=self.start + self.committed)
            self.committed += 1

    async def until(self, at_least: int) -> None:
        """Wait until this trickle has committed ``at_least`` views in all."""

        async def enough() -> bool:
            return self.committed >= at_least

        await wait_for(enough)

    async def stop(self) -> int:
        self._stop.set()
        await self._task
        return self.committed
