"""Event search over 1,000,000 events: milliseconds per page of every filter (docs/guides/operate.md).

Run by hand: ``.venv/bin/python bench/event_search.py [N] [--store sqlite,postgres]
[--no-readme]``. For each store (PostgreSQL: a private server with fsync on, see
``stores.py``) it commits N events, 5,000 per transaction: 80 % ``LinkVisited``
over 1,000 links, 15 % ``ArticleViewed``, 5 % ``UserRegistered``, each under a trace
id of its own but every hundredth trace, which four events share (a request and what
its handlers appended). Then, in this process, each query below is run 20 times
as the route runs it (``event_search.search`` and the JSON encoding of the page) for
its first page and for the page after 100 pages read through the cursor, and the
median and the slowest are reported. docs/guides/operate.md target: under 100 ms per page.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import msgspec
from readme import record
from stores import Stores, parse_stores

from sluice.app.assembly import open_store
from sluice.builtin.accounts.events import UserRegistered
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.links.events import LinkVisited
from sluice.config import load_config
from sluice.events import Event
from sluice.history.search import EventQuery, decode_cursor, search
from sluice.store import Store

PER_TX = 5_000
ROUNDS = 20
DEEP = 100  # pages read through the cursor before the deep page is timed


def make_event(i: int, rng: random.Random) -> Event:
    trace = f"{10**9 + i // 100 if i % 100 < 4 else i + 1:032x}"  # the first 4 of 100 share one
    roll = rng.random()
    if roll < 0.8:
        return LinkVisited(code=f"l{rng.randrange(1000)}", visitor=f"v{i}", trace_id=trace)
    if roll < 0.95:
        return ArticleViewed(article_id=f"a{rng.randrange(1000)}", viewer=f"v{i}", trace_id=trace)
    return UserRegistered(user_id=f"u{i}", email=f"u{i}@example.com", trace_id=trace)


async def fill(store: Store, n: int) -> tuple[float, str, str]:
    """Seconds to commit, and the created_at of the middle and of the 90 % event."""
    rng = random.Random(11)
    started = time.perf_counter()
    for i in range(0, n, PER_TX):
        async with store.transaction() as tx:
            await tx.append(*(make_event(j, rng) for j in range(i, min(n, i + PER_TX))))
    seconds = time.perf_counter() - started
    marks = []
    for seq in (n // 2, n * 9 // 10):
        row = await store.fetchone(
            "SELECT created_at FROM events WHERE seq >= ? ORDER BY seq LIMIT 1", (seq,)
        )
        assert row is not None
        marks.append(str(row[0]))
    return seconds, marks[0], marks[1]


async def timed_page(store: Store, query: EventQuery) -> tuple[float, int]:
    started = time.perf_counter()
    page = await search(store, query)
    msgspec.json.encode(page)
    return (time.perf_counter() - started) * 1000, len(page.items)


async def deep_query(store: Store, query: EventQuery) -> EventQuery | None:
    """``query`` at the page after ``DEEP`` pages, or None when there are fewer."""
    for _ in range(DEEP):
        page = await search(store, query)
        if page.next_cursor is None:
            return None
        query = replace(query, after=decode_cursor(page.next_cursor))
    return query


async def measure(env: dict[str, str], n: int) -> tuple[float, list[tuple[str, str, str, int]]]:
    store = await open_store(load_config(env))
    try:
        filled, middle, late = await fill(store, n)
        await store.refresh_statistics("events")
        queries = {
            "newest, no filter": EventQuery(),
            "type=UserRegistered (5 %)": EventQuery(type="UserRegistered"),
            "type=LinkVisited (80 %)": EventQuery(type="LinkVisited"),
            "aggregate=articles": EventQuery(aggregate="articles"),
            "trace_id (4 events)": EventQuery(trace_id=f"{10**9 + 1:032x}"),
            "since..until (40 % of the history)": EventQuery(since=middle, until=late),
            "type=UserRegistered, since..until": EventQuery(
                type="UserRegistered", since=middle, until=late
            ),
        }
        rows = []
        for name, query in queries.items():
            deep = await deep_query(store, query)
            for depth, q in (("first page", query), (f"page {DEEP + 1}", deep)):
                if q is None:
                    rows.append((name, depth, "-", 0))
                    continue
                times = []
                items = 0
                for _ in range(ROUNDS):
                    ms, items = await timed_page(store, q)
                    times.append(ms)
                shown = f"{statistics.median(times):.1f} / {max(times):.1f}"
                rows.append((name, depth, shown, items))
        return filled, rows
    finally:
        await store.close()


def main(args: argparse.Namespace) -> None:
    stores = parse_stores(args.store)
    results: dict[str, tuple[float, list[tuple[str, str, str, int]]]] = {}
    with tempfile.TemporaryDirectory() as tmp, Stores(stores) as pg:
        for store in stores:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
            env.update(SLUICE_LOG_LEVEL="warning")
            env.update(pg.env(store, Path(tmp) / f"data-{store}"))
            try:
                results[store] = asyncio.run(measure(env, args.n))
            finally:
                pg.drop(env)
            print(f"{store}: filled in {results[store][0]:.1f} s", flush=True)
        label = pg.label()
    names = list(results)
    lines = [
        f"{args.n:,} events; ms per page of 50 (search + JSON), median / slowest of {ROUNDS}:",
        "",
        "| query | page | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for i, (name, depth, _, _) in enumerate(results[names[0]][1]):
        cells = [results[s][1][i][2] for s in names]
        lines.append(f"| {name} | {depth} | " + " | ".join(cells) + " |")
    slowest = max(float(r[2].split(" / ")[1]) for s in names for r in results[s][1] if r[2] != "-")
    verdict = "met" if slowest < 100 else "missed"
    lines += ["", f"Slowest page: **{slowest:.1f} ms** (target < 100 ms: {verdict})"]
    table = "\n".join(lines)
    print(table)
    if not args.no_readme:
        record(
            "event-search", "event_search.py: a page of events over 1,000,000", table, extra=label
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--store", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--no-readme", action="store_true")
    main(parser.parse_args())
