"""The event history at scale: bytes per visit in the events table and in archive segments.

Run by hand: ``.venv/bin/python bench/history.py [--visits 1000000] [--segment 100000]
[--links 3000] [--visitors 200000] [--visitor-skew 0.7] [--seed 1]
[--store sqlite|postgres|sqlite,postgres] [--hot-days 7]``.

Generates ``--visits`` realistic ``LinkVisited`` events, as the redirect view
builds them: link codes of the code pool over ``--links`` links with a Zipf
(s = 1.1) popularity; ``--visitors`` people, each one IP and one User-Agent
(from a weighted pool of real ones, classified by ``sluice.builtin.links.visits.classify``
into browser family and bot), hashed by the API's ``VisitorHasher``, who come
back: visitor ranks weighted 1/rank**skew (0: every visitor as likely);
~5% of visits from a few hundred crawler and previewer visitors; referrer
hosts with a long tail, none for ~45%; arrivals a Poisson process at
1,000/s, UUIDv7 event ids of the arrival millisecond, a random trace id each,
and ``created_at`` of a group commit (VisitRecorder: 5 ms after the first
visit it holds, plus the commit's latency), shared by the visits committed
together.

They are inserted into a fresh SQLite store (``open_store``, migrated: the real
events table and its indexes, 5,000 per transaction), whose file after a WAL
checkpoint gives the hot bytes per event; read back page by page with
``Store.events_after`` (the project's reader) and with a bare ``sqlite3``
cursor; then archived into segments of ``--segment`` events, which are decoded
again and compared with the rows read, row for row. On PostgreSQL (a private
server, ``bench/stores.py``) the hot size is ``pg_total_relation_size('events')``:
the table, its TOAST and its indexes. Prints one table per
store, then the capacity each figure means: disk per day and per year at 1k, 10k
and 100k redirects per second, the hot table bounded by ``--hot-days``.

Then, on the same store and the same events, the history's two costs in time, each
in a child process of its own (spawned: its peak RSS, ``VmHWM``, is its own):

- replay: ``sluice.projections.replay.rebuild`` of ``link-stats`` (what ``sluice
  replay link-stats`` runs; a private Redis for the resources, never the machine's),
  timed alone, first over the history all hot, then over the same history with all
  but its newest 5% archived; the two rebuilt projections must agree;
- archive: the real archive run between the two (``sluice.history.archive.limits``
  and ``archive``, segments of ``--segment`` as ``SLUICE_HISTORY_SEGMENT_EVENTS``,
  the relay's position at the head, no group holding events back), its clock set
  so that the oldest 95% are past the hot window (the visits were generated on
  2026-03-02: ``now`` is the ``created_at`` of the first visit to keep hot, plus
  ``--hot-days``), events/s moved from the table into ``history_segments``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import multiprocessing
import random
import resource
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from stores import Stores, parse_stores

from sluice.app.assembly import default_apps, open_resources, open_store
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.pool import new_codes
from sluice.builtin.links.visits import classify
from sluice.config import load_config
from sluice.embedded.redis_server import RedisServer
from sluice.events import decode as decode_event
from sluice.events import encode
from sluice.history import decode, read_info
from sluice.history import encode as encode_segment
from sluice.history.archive import Moved, limits
from sluice.history.archive import archive as archive_events
from sluice.history.segment import EventRow
from sluice.http.visitors import VisitorHasher
from sluice.projections.replay import rebuild
from sluice.relay.relay import POSITION
from sluice.store import Store
from sluice.telemetry.logs import configure_logging

RATE = 1_000  # visits per second
FLUSH = timedelta(milliseconds=5)  # VisitRecorder's interval
PER_TX = 5_000
PAGE = 10_000
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # the first visit's arrival
REPLAYED = "link-stats"
REPLAY_TARGETS = {"sqlite": 300_000, "postgres": 100_000}  # docs/benchmarks.md, events/s

# (weight, User-Agent): a desktop and mobile mix, then crawlers and link previewers.
_WIN, _MAC = "Windows NT 10.0; Win64; x64", "Macintosh; Intel Mac OS X 10_15_7"
_IPHONE = "iPhone; CPU iPhone OS 17_5 like Mac OS X"
_BLINK, _WEBKIT = (
    "AppleWebKit/537.36 (KHTML, like Gecko)",
    "AppleWebKit/605.1.15 (KHTML, like Gecko)",
)
_CHROME, _MOBILE = "Chrome/126.0.0.0 Safari/537.36", "Mobile/15E148"
HUMAN_AGENTS = (
    (30, f"Mozilla/5.0 ({_WIN}) {_BLINK} {_CHROME}"),
    (8, f"Mozilla/5.0 ({_WIN}) {_BLINK} Chrome/125.0.0.0 Safari/537.36"),
    (10, f"Mozilla/5.0 ({_MAC}) {_BLINK} {_CHROME}"),
    (12, f"Mozilla/5.0 ({_IPHONE}) {_WEBKIT} Version/17.5 {_MOBILE} Safari/604.1"),
    (4, f"Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) {_WEBKIT} Version/17.5 {_MOBILE}"),
    (6, f"Mozilla/5.0 ({_MAC}) {_WEBKIT} Version/17.5 Safari/605.1.15"),
    (14, f"Mozilla/5.0 (Linux; Android 10; K) {_BLINK} Chrome/126.0.0.0 Mobile Safari/537.36"),
    (4, f"Mozilla/5.0 ({_WIN}; rv:127.0) Gecko/20100101 Firefox/127.0"),
    (2, "Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0"),
    (5, f"Mozilla/5.0 ({_WIN}) {_BLINK} {_CHROME} Edg/126.0.0.0"),
    (
        3,
        f"Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S918B) {_BLINK} SamsungBrowser/25.0"
        " Chrome/121.0.0.0 Mobile Safari/537.36",
    ),
    (2, f"Mozilla/5.0 ({_IPHONE}) {_WEBKIT} CriOS/126.0.6478.54 {_MOBILE} Safari/604.1"),
    (1, f"Mozilla/5.0 ({_WIN}) {_BLINK} {_CHROME} OPR/111.0.0.0"),
    (1, f"Mozilla/5.0 ({_IPHONE}) {_WEBKIT} {_MOBILE} Instagram 335.0.0.0"),
    (1, ""),
)
BOT_AGENTS = (
    (5, "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"),
    (2, "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"),
    (3, "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)"),
    (3, "Twitterbot/1.0"),
    (2, "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"),
    (1, "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)"),
    (1, "TelegramBot (like TwitterBot)"),
    (1, "WhatsApp/2.23.20.0"),
    (1, "curl/8.5.0"),
    (1, "python-requests/2.32.3"),
)
REFERRERS = (
    (45, None),
    (12, "www.google.com"),
    (6, "t.co"),
    (4, "l.facebook.com"),
    (3, "news.ycombinator.com"),
    (3, "www.reddit.com"),
    (2, "www.linkedin.com"),
    (2, "lnkd.in"),
    (2, "duckduckgo.com"),
    (1, "www.bing.com"),
    (1, "mail.google.com"),
    (1, "outlook.live.com"),
    (1, "github.com"),
    (1, "l.instagram.com"),
)
TAIL_REFERRERS = 2_000  # blogs and forums, 15% of visits between them
BOTS = 300
BOT_SHARE = 0.05


class Population:
    """Links, visitors and referrers, drawn once; ``visit`` picks one visit's parts."""

    def __init__(self, args: argparse.Namespace, rng: random.Random) -> None:
        self.rng = rng
        self.codes = new_codes(args.links, rng.randbytes)
        self.code_weights = _zipf_cumulative(args.links, 1.1)
        hasher = VisitorHasher(b"bench-visitor-key")
        self.humans = self._visitors(hasher, args.visitors, HUMAN_AGENTS)
        self.human_weights = _zipf_cumulative(args.visitors, args.visitor_skew)
        self.bots = self._visitors(hasher, BOTS, BOT_AGENTS)
        self.bot_weights = _zipf_cumulative(BOTS, 1.0)
        tail = [
            f"{rng.choice(('blog', 'forum', 'www', 'news'))}.site{i}.example"
            for i in range(TAIL_REFERRERS)
        ]
        self.referrers: list[str | None] = [*(host for _, host in REFERRERS), *tail]
        weights = [w / 85 * 0.85 for w, _ in REFERRERS] + [0.15 / TAIL_REFERRERS] * TAIL_REFERRERS
        self.referrer_weights = list(itertools.accumulate(weights))

    def _visitors(
        self, hasher: VisitorHasher, count: int, agents: tuple[tuple[int, str], ...]
    ) -> list[tuple[str, str, bool]]:
        """(visitor hash, browser, is_bot) of ``count`` people, each an IP and a User-Agent."""
        uas = self.rng.choices([ua for _, ua in agents], [w for w, _ in agents], k=count)
        ips = [
            f"{self.rng.randrange(1, 224)}.{self.rng.randrange(256)}.{self.rng.randrange(256)}"
            f".{self.rng.randrange(1, 255)}"
            for _ in range(count)
        ]
        return [(hasher(ip, ua), *classify(ua)) for ip, ua in zip(ips, uas, strict=True)]

    def visit(self) -> tuple[str, tuple[str, str, bool], str | None]:
        rng = self.rng
        code = self.codes[_pick(self.code_weights, rng)]
        if rng.random() < BOT_SHARE:
            visitor = self.bots[_pick(self.bot_weights, rng)]
        else:
            visitor = self.humans[_pick(self.human_weights, rng)]
        return code, visitor, self.referrers[_pick(self.referrer_weights, rng)]


def _zipf_cumulative(count: int, skew: float) -> list[float]:
    return list(itertools.accumulate(1 / rank**skew for rank in range(1, count + 1)))


def _pick(cumulative: list[float], rng: random.Random) -> int:
    return bisect.bisect(cumulative, rng.random() * cumulative[-1])


def uuid7_at(moment: datetime, rng: random.Random) -> str:
    """``sluice.events.uuid7`` of a given moment, with the bench's own random bits."""
    ms = int(moment.timestamp() * 1000)
    rand = rng.getrandbits(74)
    value = ms << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0x2 << 62 | rand & (2**62 - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


Row = tuple[str, str, str, bytes, str, str]  # the events table's columns but seq


def visits(count: int, population: Population, rng: random.Random) -> Iterator[Row]:
    """(event_id, type, aggregate, payload, trace_id, created_at) of ``count`` visits."""
    now = committed = START
    batch: list[LinkVisited] = []
    for _ in range(count):
        now += timedelta(microseconds=int(rng.expovariate(RATE) * 1e6))
        if batch and now - batch[0].occurred_at >= FLUSH:
            committed = _committed(batch[0].occurred_at + FLUSH, committed, rng)
            yield from _rows(batch, committed)
            batch = []
        code, (visitor, browser, is_bot), referrer = population.visit()
        batch.append(
            LinkVisited(
                code=code,
                visitor=visitor,
                referrer_host=referrer,
                browser=browser,
                is_bot=is_bot,
                occurred_at=now,
                trace_id=f"{rng.getrandbits(128) or 1:032x}",
                event_id=uuid7_at(now, rng),
            )
        )
    if batch:
        yield from _rows(batch, _committed(batch[0].occurred_at + FLUSH, committed, rng))


def _committed(flushed: datetime, previous: datetime, rng: random.Random) -> datetime:
    """When a batch flushed at ``flushed`` commits: after ~0.8 ms, never before the
    previous commit (one writer)."""
    latency = timedelta(microseconds=int(rng.expovariate(1 / 800)))
    return max(flushed + latency, previous + timedelta(microseconds=1))


def _rows(batch: list[LinkVisited], committed: datetime) -> Iterator[Row]:
    created_at = committed.isoformat()  # as the store writes it
    for e in batch:
        yield (e.event_id, "LinkVisited", e.aggregate, encode(e), e.trace_id, created_at)


async def fill(store: Store, rows: Iterator[Row]) -> None:
    sql = (
        "INSERT INTO events (event_id, type, aggregate, payload, trace_id, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)"
    )
    while chunk := list(itertools.islice(rows, PER_TX)):
        async with store.transaction() as tx:
            await tx.executemany(sql, chunk)


async def read_all(store: Store) -> tuple[list[EventRow], float]:
    """Every row, through the store's own reader, and the seconds it took."""
    rows: list[EventRow] = []
    started = time.perf_counter()
    while page := await store.events_after(rows[-1][0] if rows else 0, PAGE):
        rows += [
            (e.seq, e.event_id, e.type, e.aggregate, e.payload, e.trace_id, e.created_at)
            for e in page
        ]
    return rows, time.perf_counter() - started


def read_sqlite(path: Path) -> tuple[int, float]:
    """Rows read by a bare sqlite3 cursor, page by page, and the seconds it took."""
    db = sqlite3.connect(path)
    count, last = 0, 0
    started = time.perf_counter()
    while page := db.execute(
        "SELECT seq, event_id, type, aggregate, payload, trace_id, created_at FROM events"
        " WHERE seq > ? ORDER BY seq LIMIT ?",
        (last, PAGE),
    ).fetchall():
        count += len(page)
        last = page[-1][0]
    seconds = time.perf_counter() - started
    db.close()
    return count, seconds


def hot_bytes(path: Path) -> tuple[int, int | None]:
    """The database file after a WAL checkpoint, and the events table and its index
    alone where SQLite has the dbstat table."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    try:
        (events,) = db.execute(
            "SELECT SUM(pgsize) FROM dbstat WHERE name IN ('events', 'sqlite_autoindex_events_1')"
        ).fetchone()
    except sqlite3.OperationalError:
        events = None
    db.close()
    return path.stat().st_size, events


def archive(rows: list[EventRow], size: int) -> tuple[list[bytes], float, float]:
    """Segments of ``size`` rows, the seconds to encode and to decode them all; every
    decoded segment is compared with its rows."""
    chunks = [rows[i : i + size] for i in range(0, len(rows), size)]
    started = time.perf_counter()
    segments = [encode_segment(chunk) for chunk in chunks]
    encoded = time.perf_counter() - started
    decoded = 0.0
    for chunk, segment in zip(chunks, segments, strict=True):
        started = time.perf_counter()
        back = decode(segment)
        decoded += time.perf_counter() - started
        if back != chunk:
            raise SystemExit("a segment did not decode to its rows")
    return segments, encoded, decoded


def table(figures: list[tuple[str, str]]) -> str:
    return "\n".join(["| figure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in figures)])


def visitors_per_segment(rows: list[EventRow], size: int) -> list[int]:
    """Distinct visitors in each segment: their hashes are most of an archived visit."""
    visitors = [decode_event(r[4]).visitor for r in rows]  # type: ignore[union-attr]
    return [len(set(visitors[i : i + size])) for i in range(0, len(rows), size)]


async def hot_rows(
    args: argparse.Namespace, env: dict[str, str]
) -> tuple[list[EventRow], float, Path | None, int | None]:
    """The generated visits in a fresh store, read back: the rows, the seconds the store's
    reader took, the SQLite file, and PostgreSQL's size of the events table (else None)."""
    rng = random.Random(args.seed)
    started = time.perf_counter()
    population = Population(args, rng)
    config = load_config(env, log_level="warning")
    configure_logging(config)
    store = await open_store(config)
    try:
        await fill(store, visits(args.visits, population, rng))
        print(
            f"{args.visits:,} visits generated and inserted in"
            f" {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        rows, seconds = await read_all(store)
        postgres_size = await _postgres_size(store) if config.postgres else None
    finally:
        await store.close()
    path = None if config.postgres else config.sqlite_path
    return rows, seconds, path, postgres_size


async def _postgres_size(store: Store) -> int:
    """The events table with its TOAST and indexes (only inserted into: no dead rows)."""
    row = await store.fetchone("SELECT pg_total_relation_size('events')")
    assert row is not None
    return int(row[0])


R = TypeVar("R")
HOT_SHARE = 0.05  # the newest events left in the table for the replay of an archived history
# The projection's tables after a rebuild, summed: both rebuilds must give the same.
DIGEST = (
    "SELECT COUNT(*), SUM(total), SUM(bots), SUM(unique_visitors) FROM link_stats",
    "SELECT COUNT(*), SUM(visits), SUM(unique_visitors) FROM link_stats_days",
    "SELECT COUNT(*), SUM(visits) FROM link_stats_referrers",
    "SELECT COUNT(*), SUM(visits) FROM link_stats_browsers",
    "SELECT COUNT(*) FROM link_visitors",
    "SELECT COUNT(*) FROM link_day_visitors",
)


@dataclass(frozen=True)
class Replayed:
    """One rebuild, in a child process of its own."""

    seconds: float  # the rebuild alone (``rebuild``), not the process's start
    events: int
    peak_kib: int  # the child's peak RSS
    digest: tuple[int, ...]

    @property
    def rate(self) -> float:
        return self.events / self.seconds


@dataclass(frozen=True)
class Archived:
    """One archive run (``limits`` and ``archive``), in a child process of its own."""

    seconds: float
    events: int
    segments: int
    slowest: float  # the longest step: one segment read, encoded, checked and committed
    peak_kib: int

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def _peak_kib() -> int:
    """This process's peak RSS in KiB. Linux's ``VmHWM``, the high-water mark of the
    process's own memory since its exec: a spawned child's ``ru_maxrss`` starts from
    its parent's peak (the fork copies it, and the exec keeps it)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1])


def replay_child(env: dict[str, str]) -> Replayed:
    return asyncio.run(_replay(env))


async def _replay(env: dict[str, str]) -> Replayed:
    config = load_config(env, log_level="warning")
    configure_logging(config)
    projection = default_apps().projections[REPLAYED]
    async with open_resources(config) as resources:
        store = resources.store
        # A rebuild drops the tables it replaces: empty ones each time, as on a fresh store.
        async with store.transaction() as tx:
            for name in projection.tables:
                await tx.execute(f"DELETE FROM {name}")
        started = time.perf_counter()
        result = await rebuild(resources, projection, progress=False)
        seconds = time.perf_counter() - started
        digest: list[int] = []
        for sql in DIGEST:
            row = await store.fetchone(sql)
            assert row is not None
            digest += [int(value or 0) for value in row]
    return Replayed(seconds, result.events, _peak_kib(), tuple(digest))


def archive_child(env: dict[str, str], segment: int, hot_days: int) -> Archived:
    return asyncio.run(_archive(env, segment, hot_days))


async def _archive(env: dict[str, str], segment: int, hot_days: int) -> Archived:
    """Archive all but the newest ``HOT_SHARE`` of the events, as the archive-history
    task does, at the moment the first event to keep turns ``hot_days`` old."""
    config = load_config(env, log_level="warning")
    configure_logging(config)
    store = await open_store(config)
    try:
        row = await store.fetchone("SELECT MIN(seq), MAX(seq) FROM events")
        assert row is not None
        oldest, newest = int(row[0]), int(row[1])
        first_hot = newest - round((newest - oldest + 1) * HOT_SHARE) + 1
        row = await store.fetchone("SELECT created_at FROM events WHERE seq = ?", (first_hot,))
        assert row is not None
        now = datetime.fromisoformat(str(row[0])) + timedelta(days=hot_days)
        await store.set_position(POSITION, newest)  # the relay has published everything
        steps: list[float] = []
        started = time.perf_counter()

        async def moved_one(_: Moved) -> None:
            steps.append(time.perf_counter())

        bounds = await limits(
            store,
            now,
            hot_days,
            newest,
            passed=None,
            segment_events=segment,
            min_events=max(1, segment // 10),
        )
        moved = await archive_events(store, bounds, after_segment=moved_one)
        seconds = time.perf_counter() - started
    finally:
        await store.close()
    slowest = max((b - a for a, b in itertools.pairwise([started, *steps])), default=0.0)
    return Archived(seconds, sum(m.events for m in moved), len(moved), slowest, _peak_kib())


def in_child(function: Callable[..., R], *args: object) -> R:
    """``function(*args)`` in a fresh (spawned) process: its memory is its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


@dataclass(frozen=True)
class Timed:
    hot: Replayed  # the replay over the history all hot
    archive: Archived
    archived: Replayed  # the replay over the history 95% archived


def replay_and_archive(args: argparse.Namespace, env: dict[str, str], kind: str) -> Timed:
    """Replay all hot, archive all but the newest 5%, replay again."""
    hot = in_child(replay_child, env)
    print(f"{kind}: {REPLAYED} replayed from the table at {hot.rate:,.0f} events/s", flush=True)
    moved = in_child(archive_child, env, args.segment, args.hot_days)
    print(f"{kind}: {moved.events:,} events archived at {moved.rate:,.0f} events/s", flush=True)
    archived = in_child(replay_child, env)
    print(
        f"{kind}: {REPLAYED} replayed, {moved.events:,} archived, at {archived.rate:,.0f} events/s",
        flush=True,
    )
    if archived.digest != hot.digest or archived.events != hot.events:
        raise SystemExit(f"the rebuilds differ: {hot} (hot) vs {archived} (archived)")
    return Timed(hot, moved, archived)


def _mib(kib: int) -> str:
    return f"{kib / 1024:,.0f} MiB"


def _met(rate: float, kind: str) -> str:
    target = REPLAY_TARGETS[kind]
    return f"{rate / target:.2f} of {target:,} ({'met' if rate >= target else 'missed'})"


def timed_figures(t: Timed, n: int, kind: str) -> list[tuple[str, str]]:
    share = t.archive.events / n
    return [
        (
            f"replay `{REPLAYED}`, all {n:,} hot (rebuild alone, child process)",
            f"**{t.hot.rate:,.0f} events/s** ({t.hot.seconds:.1f} s)",
        ),
        (
            "archive run: limits + archive, into `history_segments`",
            f"**{t.archive.rate:,.0f} events/s**: {t.archive.events:,} events in"
            f" {t.archive.seconds:.1f} s, {t.archive.segments} segments",
        ),
        (
            "archive run: longest step (one segment read, encoded, checked, committed)",
            f"{t.archive.slowest:.2f} s",
        ),
        (
            f"replay `{REPLAYED}`, {share:.1%} archived",
            f"**{t.archived.rate:,.0f} events/s** ({t.archived.seconds:.1f} s)",
        ),
        ("replay: archived / hot", f"**{t.archived.rate / t.hot.rate:.2f}**"),
        (
            "replay: of the docs/benchmarks.md target, hot / archived",
            f"{_met(t.hot.rate, kind)} / {_met(t.archived.rate, kind)}",
        ),
        (
            "peak RSS: replay hot / archive run / replay archived",
            f"{_mib(t.hot.peak_kib)} / {_mib(t.archive.peak_kib)} / {_mib(t.archived.peak_kib)}",
        ),
    ]


def replay_table(timed: dict[str, Timed]) -> str:
    lines = [
        f"| store | replay `{REPLAYED}`, all hot | replay, 95% archived | archived / hot"
        " | docs/benchmarks.md target | peak RSS, hot / archived | archive run |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, t in timed.items():
        lines.append(
            f"| {kind} | {t.hot.rate:,.0f} events/s | {t.archived.rate:,.0f} events/s"
            f" | {t.archived.rate / t.hot.rate:.2f} | >= {REPLAY_TARGETS[kind]:,}"
            f" | {_mib(t.hot.peak_kib)} / {_mib(t.archived.peak_kib)}"
            f" | {t.archive.rate:,.0f} events/s |"
        )
    return "\n".join(lines)


@dataclass
class Measured:
    figures: list[tuple[str, str]]
    hot: float  # bytes per event in the events table
    archived: float  # bytes per event in segments
    timed: Timed


def measure(args: argparse.Namespace, env: dict[str, str], kind: str) -> Measured:
    rows, store_read, path, postgres_size = asyncio.run(hot_rows(args, env))
    segments, encoded, decoded = archive(rows, args.segment)
    n, sizes = len(rows), [len(s) for s in segments]
    distinct = visitors_per_segment(rows, args.segment)
    bots = sum(b'"is_bot":true' in r[4] for r in rows)
    if kind == "postgres":
        assert postgres_size is not None
        hot = postgres_size / n
        hot_figures = [("hot: events table, TOAST and indexes, per event", f"{hot:,.0f} bytes")]
        raw = None
    else:
        assert path is not None
        file_size, events_size = hot_bytes(path)
        hot = file_size / n
        dbstat = "n/a" if events_size is None else f"{events_size / n:,.0f} bytes"
        hot_figures = [
            ("hot: SQLite file after checkpoint, per event", f"{hot:,.0f} bytes"),
            ("hot: events table + its index (dbstat), per event", dbstat),
        ]
        raw = read_sqlite(path)
    archived = sum(sizes) / n
    figures = [
        ("visits", f"{n:,}, {bots / n:.1%} from bots"),
        ("distinct visitors per segment", f"{min(distinct):,} to {max(distinct):,}"),
        *hot_figures,
        ("hot: payload alone, per event", f"{sum(len(r[4]) for r in rows) / n:,.0f} bytes"),
        (
            f"archived: {len(segments)} segment(s) of {args.segment:,}, per event",
            f"**{sum(sizes) / n:.1f} bytes**",
        ),
        (
            "archived: smallest / largest segment",
            f"{min(sizes) / 1e6:.2f} MB / {max(sizes) / 1e6:.2f} MB",
        ),
        (
            "payloads kept as bytes (not split)",
            f"{sum(read_info(s).raw_payloads for s in segments):,}",
        ),
        ("read: Store.events_after, pages of 10,000", f"{n / store_read:,.0f} events/s"),
        *(
            [("read: bare sqlite3 cursor, pages of 10,000", f"{raw[0] / raw[1]:,.0f} events/s")]
            if raw
            else []
        ),
        ("encode segments", f"{n / encoded:,.0f} events/s"),
        ("decode segments (to rows)", f"**{n / decoded:,.0f} events/s**"),
    ]
    del rows, segments  # the children below have the machine's memory to themselves
    timed = replay_and_archive(args, env, kind)
    return Measured([*figures, *timed_figures(timed, n, kind)], hot, archived, timed)


RATES = (1_000, 10_000, 100_000)  # redirects (visit events) per second
DAY = 86_400


def _size(n: float) -> str:
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def capacity(measured: dict[str, Measured], hot_days: int) -> str:
    """Disk at each rate: the hot window (bounded), and segments per day and per year."""
    lines = [
        f"| store | redirects/s | events a day | hot table ({hot_days} days, bounded) |"
        " archived per day | archived per year | all kept in the table, per year |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, m in measured.items():
        for rate in RATES:
            events = rate * DAY
            lines.append(
                f"| {kind} | {rate:,} | {events / 1e6:,.1f} M | {_size(m.hot * events * hot_days)}"
                f" | {_size(m.archived * events)} | {_size(m.archived * events * 365)}"
                f" | {_size(m.hot * events * 365)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=1_000_000)
    parser.add_argument("--segment", type=int, default=100_000)
    parser.add_argument("--links", type=int, default=3_000)
    parser.add_argument("--visitors", type=int, default=200_000)
    parser.add_argument("--visitor-skew", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--store", type=parse_stores, default=["sqlite"])
    parser.add_argument("--hot-days", type=int, default=7)
    args = parser.parse_args()
    measured: dict[str, Measured] = {}
    with (
        Stores(args.store) as stores,
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "redis") as redis,  # only for the replay's resources
    ):
        for kind in args.store:
            env = {**stores.env(kind, Path(tmp) / kind), "SLUICE_REDIS_URL": redis.url}
            try:
                measured[kind] = measure(args, env, kind)
            finally:
                stores.drop(env)
            print(f"\n{kind}:\n{table(measured[kind].figures)}", flush=True)
        label = stores.label()
    if label:
        print(f"\n{label}")
    print(f"\nreplay and archive:\n{replay_table({k: m.timed for k, m in measured.items()})}")
    print(f"\ncapacity:\n{capacity(measured, args.hot_days)}")


if __name__ == "__main__":
    main()
