"""Archive under traffic: redirects and article views keep flowing while a real
``sluice tasks run archive-history`` process moves the old history into segments and is
killed with kill -9 midway; a second run archives the rest. Afterwards a replay of both
projections gives exactly the live numbers, an export of a link whose visits span
segments and the hot table lists each visit once, and every event is in the table or
in one segment, never both, never neither.

Everything but the archive runs as it is deployed: an API, a relay and a worker process
(``link-stats``, ``article-views``, ``exports``, ``imports``, ``webhooks``). The history
served before the archive runs is made old (``created_at`` backdated) once both
projections have applied it; the traffic during the archive is new, so it stays hot.
"""

from __future__ import annotations

import asyncio
import csv
import io
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sluice.app.testing import Child, child_env, wait_answering, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from sluice.events import decode
from sluice.history import catalog
from sluice.history.segment import EventRow
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from sluice.scheduler.runs import ABANDONED
from sluice.store.base import Row
from tests.integration.archive_helpers import LONG_AGO, archived_rows, hot_rows, make_old
from tests.integration.link_traffic import Traffic, comparable, today, traffic
from tests.link_helpers import add_link, add_user, bearer

pytestmark = pytest.mark.slow

CODE = "spans"  # the exported link
OTHER = "beside"  # its visits share the segments with CODE's: never in CODE's export
ARTICLES = ("a0", "a1", "a2")
TASK = "archive-history"
SEGMENT_EVENTS = 10  # a run writes about 180 segments, one transaction each
MIN_EVENTS = SEGMENT_EVENTS // 10
ARCHIVE_ENV = {
    "SLUICE_HISTORY_SEGMENT_EVENTS": str(SEGMENT_EVENTS),
    "SLUICE_TASK_LOCK_TTL_MS": "1000",  # the killed run's lock expires within a second
}
OLD_ROUNDS = 60  # of traffic before the archive: about 1,800 events to archive
MAX_ROUNDS = 400  # during the archive: the loop is bounded, whatever happens
GROUP_STREAMS = {"link-stats": "visits", "article-views": "articles"}  # projection: aggregate
# Projection tables compared after a replay (processed-id tables and times left out).
SNAPSHOT = (
    "SELECT code, total, bots, unique_visitors FROM link_stats ORDER BY code",
    "SELECT * FROM link_stats_days ORDER BY code, day",
    "SELECT * FROM link_stats_referrers ORDER BY code, referrer",
    "SELECT * FROM link_stats_browsers ORDER BY code, browser",
    "SELECT * FROM link_visitors ORDER BY code, visitor",
    "SELECT * FROM link_day_visitors ORDER BY code, day, visitor",
    "SELECT article_id, views FROM article_views ORDER BY article_id",
    "SELECT * FROM article_view_periods ORDER BY period, start, article_id",
)


class Views:
    """Article views through the API: every viewer views each article twice; the first
    view is counted, the second (within the dedupe window) is not."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url
        self.session = session
        self.viewers: dict[str, set[str]] = {a: set() for a in ARTICLES}
        self.next = 0

    async def view(self, article: str, viewer: str) -> bool:
        url = f"{self.base_url}/v1/articles/{article}/views"
        async with self.session.post(url, json={"viewer": viewer}) as response:
            assert response.status == 202, await response.text()
            body: dict[str, Any] = await response.json()
        return bool(body["counted"])

    async def round(self, viewers: int = 2) -> None:
        batch = [(a, f"viewer-{self.next + i}") for a in ARTICLES for i in range(viewers)]
        self.next += viewers
        assert all(await asyncio.gather(*(self.view(a, v) for a, v in batch)))
        assert not any(await asyncio.gather(*(self.view(a, v) for a, v in batch)))
        for article, viewer in batch:
            self.viewers[article].add(viewer)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.viewers.values())

    async def counts(self) -> dict[str, int]:
        """What GET /v1/articles/{id} answers for each article."""
        counts = {}
        for article in ARTICLES:
            async with self.session.get(f"{self.base_url}/v1/articles/{article}") as response:
                assert response.status == 200, await response.text()
                counts[article] = int((await response.json())["views"])
        return counts


class Load:
    """Redirects of both links and article views, a round at a time, all answered."""

    def __init__(self, links: Traffic, others: Traffic, views: Views) -> None:
        self.links, self.others, self.views = links, others, views
        self.rounds = 0

    async def round(self) -> None:
        """CODE's redirects, the views and, every other round, OTHER's redirects, at once."""

        async def redirects(t: Traffic, code: str) -> None:
            assert set(await t.round(code)) == {302}

        others = [redirects(self.others, OTHER)] if self.rounds % 2 else []
        await asyncio.gather(redirects(self.links, CODE), self.views.round(), *others)
        self.rounds += 1

    async def until(self, stop: asyncio.Event) -> None:
        """Rounds until ``stop`` (at most MAX_ROUNDS)."""
        while not stop.is_set():
            assert self.rounds < MAX_ROUNDS, "the archive never finished under traffic"
            await self.round()

    @property
    def visits(self) -> int:
        return self.links.ledger.total + self.others.ledger.total


async def totals(resources: Resources) -> tuple[int, int]:
    """(visits, views) the live projections have counted, all links and articles."""
    row = await resources.store.fetchone(
        "SELECT (SELECT COALESCE(SUM(total), 0) FROM link_stats),"
        " (SELECT COALESCE(SUM(views), 0) FROM article_views)"
    )
    assert row is not None
    return int(row[0]), int(row[1])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def settled(resources: Resources) -> bool:
    """Every committed event published, and both projections' groups have read and acked
    every entry of their streams, with no retry waiting."""
    store, redis, keys = resources.store, resources.redis, resources.keys
    if await store.position(POSITION) < await store.max_seq():
        return False
    for group, aggregate in GROUP_STREAMS.items():
        stream = keys.stream(aggregate)
        if not await redis.exists(stream) or await redis.zcard(keys.delayed(group)):
            return False
        last = (await redis.xinfo_stream(stream))["last-generated-id"]
        state = {_text(g["name"]): g for g in await redis.xinfo_groups(stream)}.get(group)
        if state is None or int(state["pending"]) or state["last-delivered-id"] != last:
            return False
    return True


async def drained(resources: Resources, load: Load) -> None:
    """Until the pipeline settled with every answered redirect and view counted; then the
    counts are exact (an extra count would show, it is not waited away)."""

    async def all_counted() -> bool:
        visits, views = await totals(resources)
        return visits >= load.visits and views >= load.views.total and await settled(resources)

    await wait_for(all_counted, timeout=30)
    assert await totals(resources) == (load.visits, load.views.total)


async def assert_user_numbers(load: Load) -> None:
    """The stats API and the article API say exactly what the traffic was answered."""
    for t, code in ((load.links, CODE), (load.others, OTHER)):
        stats = await t.stats(code, f"?from={today()}&to={today()}")
        assert comparable(stats) == t.ledger.expected(code)
    assert await load.views.counts() == {a: len(v) for a, v in load.views.viewers.items()}


async def assert_each_event_once(
    resources: Resources, before: list[EventRow]
) -> tuple[list[EventRow], list[EventRow]]:
    """Every event made before the archive is in the table or in one segment, unchanged;
    none is in both or in two segments; only those events were archived. Returns
    (archived, hot) rows."""
    archived, hot = await archived_rows(resources.store), await hot_rows(resources.store)
    every = archived + hot
    assert len({r[0] for r in every}) == len(every), "a seq both archived and hot, or twice"
    assert len({r[1] for r in every}) == len(every), "an event id both archived and hot"
    last = before[-1][0]
    assert sorted(r for r in every if r[0] <= last) == before
    assert all(r[0] <= last for r in archived), "a new (hot) event was archived"
    return archived, hot


async def assert_history_holds_the_traffic(
    resources: Resources, before: list[EventRow], load: Load
) -> None:
    """Once drained: every answered redirect and counted view is in the history (table
    or segments) once, and nothing else of those types is."""
    archived, hot = await assert_each_event_once(resources, before)
    history = count_types(archived + hot)
    assert (history["LinkVisited"], history["ArticleViewed"]) == (load.visits, load.views.total)


def count_types(rows: list[EventRow]) -> Counter[str]:
    return Counter(r[2] for r in rows)


async def segment_count(resources: Resources) -> int:
    row = await resources.store.fetchone("SELECT COUNT(*) FROM history_segments")
    return int(row[0]) if row else 0


async def runs(resources: Resources) -> list[tuple[str, str | None]]:
    rows = await resources.store.fetchall(
        "SELECT status, error FROM task_runs WHERE task = ? ORDER BY started_at", (TASK,)
    )
    return [(str(s), None if e is None else str(e)) for s, e in rows]


async def export_csv(session: aiohttp.ClientSession, base_url: str) -> list[list[str]]:
    """Request an export of CODE through the API, wait for it, download its CSV rows."""
    async with session.post(f"{base_url}/v1/links/{CODE}/exports", headers=bearer()) as response:
        assert response.status == 202, await response.text()
        status_url = (await response.json())["status_url"]
    job: dict[str, Any] = {}

    async def finished() -> bool:
        nonlocal job
        async with session.get(status_url, headers=bearer()) as response:
            assert response.status == 200, await response.text()
            job = await response.json()
        return job["status"] in ("succeeded", "failed")

    await wait_for(finished, timeout=30)
    assert job["status"] == "succeeded", job
    async with session.get(job["result_url"], headers=bearer()) as response:
        assert response.status == 200, await response.text()
        text = await response.text()
    header, *rows = csv.reader(io.StringIO(text, newline=""))
    assert header[:5] == ["visited_at", "visitor", "referrer_host", "browser", "is_bot"]
    return rows


def as_csv(row: EventRow) -> tuple[datetime, str, str, str, str] | None:
    """A history row as a line of CODE's export, None if it is not one of its visits."""
    event = decode(row[4])
    if not isinstance(event, LinkVisited) or event.code != CODE:
        return None
    return (
        event.occurred_at,
        event.visitor,
        event.referrer_host or "",
        event.browser,
        "true" if event.is_bot else "false",
    )


def parsed(row: list[str]) -> tuple[datetime, str, str, str, str]:
    return (datetime.fromisoformat(row[0].replace("Z", "+00:00")), row[1], row[2], row[3], row[4])


async def assert_export_lists_each_visit_once(
    resources: Resources, session: aiohttp.ClientSession, base_url: str, load: Load
) -> None:
    segments_with_code = 0
    for segment in await catalog.segments(resources.store, types=["LinkVisited"]):
        rows = await catalog.load(resources.store, segment)
        segments_with_code += any(as_csv(r) for r in rows)
    hot = [r for r in await hot_rows(resources.store) if as_csv(r)]
    assert segments_with_code >= 2 and hot, "the link's visits do not span segments and table"
    history = sorted(await archived_rows(resources.store) + await hot_rows(resources.store))
    expected = [line for line in map(as_csv, history) if line is not None]
    assert len(expected) == load.links.ledger.total

    exported = [parsed(row) for row in await export_csv(session, base_url)]
    assert exported == expected  # each visit once, in history order


def sluice(config: Config, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        env=child_env(config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def replay_gives_the_live_numbers(config: Config, resources: Resources, load: Load) -> None:
    live = [await resources.store.fetchall(sql) for sql in SNAPSHOT]
    expected = {"link-stats": load.visits, "article-views": load.views.total}
    for name, events in expected.items():
        done = await asyncio.to_thread(sluice, config, "replay", name, "--no-progress")
        assert done.returncode == 0, done.stderr
        assert f"{name}: rebuilt from {events} events" in done.stdout
    rebuilt: list[list[Row]] = [await resources.store.fetchall(sql) for sql in SNAPSHOT]
    assert rebuilt == live


async def start_deployment(
    resources: Resources, spawn: Callable[..., Child], logs: Path
) -> tuple[Child, str]:
    """The two links, then an API, a relay and a worker process; the API and its URL."""
    await add_user(resources.store)
    await add_link(resources.store, CODE, "https://example.org/spans")
    await add_link(resources.store, OTHER, "https://example.org/beside")
    port = free_port()
    api = spawn("api", SLUICE_PORT=str(port), log=logs / "api.log")
    spawn("relay", log=logs / "relay.log")
    # Every group on the archived streams: the archive waits for each one's acks.
    spawn(
        "worker",
        "link-stats",
        "article-views",
        "exports",
        "imports",
        "webhooks",
        log=logs / "worker.log",
    )
    base_url = f"http://127.0.0.1:{port}"
    await wait_answering([base_url])
    return api, base_url


async def archive_killed_midway_then_finished(
    resources: Resources,
    spawn: Callable[..., Child],
    logs: Path,
    load: Load,
    before: list[EventRow],
) -> int:
    """While ``load`` flows: an archive run killed with kill -9 once it committed two
    segments, then, once its lock expired, a run to the end. The segments there were at
    the kill."""

    def archive(log: str) -> Child:
        return spawn("tasks", "run", TASK, log=logs / log, **ARCHIVE_ENV)

    async def two_segments() -> bool:
        return await segment_count(resources) >= 2

    async def lock_expired() -> bool:
        return await resources.redis.exists(resources.keys.task_lock(TASK)) == 0

    rounds = load.rounds
    first = archive("archive-1.log")
    await wait_for(two_segments, interval=0.002)
    assert first.process is not None
    first.process.send_signal(signal.SIGSTOP)  # frozen: it commits nothing more
    assert await runs(resources) == [("running", None)], "the run ended before the kill"
    first.kill()
    killed_at = await segment_count(resources)
    assert load.rounds > rounds, "no traffic answered during the killed run"
    await assert_each_event_once(resources, before)

    await wait_for(lock_expired, timeout=5)
    rounds = load.rounds
    assert await archive("archive-2.log").wait() == 0
    assert load.rounds > rounds, "no traffic answered during the second run"
    assert await runs(resources) == [("failed", ABANDONED), ("succeeded", None)]
    return killed_at


async def test_archive_killed_midway_under_traffic_loses_and_doubles_nothing(
    config: Config, resources: Resources, spawn: Callable[..., Child], tmp_path: Path
) -> None:
    store = resources.store
    api, base_url = await start_deployment(resources, spawn, tmp_path)
    day = today()
    async with (
        traffic(base_url) as links,
        traffic(base_url) as others,
        aiohttp.ClientSession() as session,
    ):
        load = Load(links, others, Views(base_url, session))
        for _ in range(OLD_ROUNDS):
            await load.round()
        await drained(resources, load)
        await make_old(store, await store.max_seq())  # applied by both projections: old
        before = await hot_rows(store)
        old = count_types(before)
        assert (old["LinkVisited"], old["ArticleViewed"]) == (load.visits, load.views.total)

        stop = asyncio.Event()
        flowing = asyncio.create_task(load.until(stop))
        try:
            killed_at = await archive_killed_midway_then_finished(
                resources, spawn, tmp_path, load, before
            )
        finally:
            stop.set()
            await flowing

        _, hot = await assert_each_event_once(resources, before)
        full = await segment_count(resources)
        assert 2 <= killed_at < full, (killed_at, full)  # the kill was midway
        # The second run archived the rest: of each aggregate, fewer old events than a
        # segment's minimum stay hot (the head of the history is new).
        left = Counter(r[3] for r in hot if r[6] == LONG_AGO)
        assert all(n < MIN_EVENTS for n in left.values()), left

        await drained(resources, load)
        await assert_history_holds_the_traffic(resources, before, load)
        if today() != day:
            pytest.skip("the traffic crossed midnight UTC")
        await assert_user_numbers(load)
        await assert_export_lists_each_visit_once(resources, session, base_url, load)
        await replay_gives_the_live_numbers(config, resources, load)
        await assert_user_numbers(load)

    assert api.terminate() == 0  # its visit writer flushed: nothing is counted late
    await drained(resources, load)
    await assert_history_holds_the_traffic(resources, before, load)
    print(f"{full} segments, {killed_at} at the kill; {load.rounds - OLD_ROUNDS} rounds during")
