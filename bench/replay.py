"""Replay of 1,000,000 events: ``sluice replay`` timed, events/s and peak memory (docs/benchmarks.md).

Run by hand: ``.venv/bin/python bench/replay.py [N] [--projection article-views|link-stats]
[--store sqlite,postgres]``. For each store (default both, one after the other in
the same run; PostgreSQL: a private server with fsync on, see ``stores.py``) it
commits N events (``ArticleViewed`` over 1,000 articles, or ``LinkVisited`` over
1,000 links and 50,000 visitors), oldest first over the last 90 days, into a store
(SQLite: in a temporary directory), 5,000 per transaction, starts its own Redis (the
rebuild rewrites the leaderboards there), then runs ``sluice replay PROJECTION
--no-progress`` as a child process and times it. Peak memory is the child's
``ru_maxrss`` (``os.wait4``). The time includes the child's start (imports,
opening the store); the rebuild alone is also read from its log line.
Writes its figures to its section of bench/README.md (``--no-readme``: don't).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from readme import record
from stores import Stores, parse_stores

from sluice.app.assembly import open_store
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.links.events import LinkVisited
from sluice.config import load_config
from sluice.embedded.redis_server import RedisServer
from sluice.events import Event, utcnow

TARGETS = {"sqlite": 300_000, "postgres": 100_000}  # docs/benchmarks.md, events/s
PER_TX = 5_000


def make_event(projection: str, i: int, n: int, rng: random.Random) -> Event:
    # A history is appended as things happen: oldest first, 90 days up to now.
    when = utcnow() - timedelta(seconds=90 * 86_400 * (n - i) / n + rng.random())
    if projection == "article-views":
        return ArticleViewed(article_id=f"a{rng.randrange(1000)}", viewer=f"v{i}", occurred_at=when)
    return LinkVisited(
        code=f"l{rng.randrange(1000)}",
        visitor=f"v{rng.randrange(50_000)}",
        occurred_at=when,
        referrer_host=rng.choice((None, "example.com", "news.ycombinator.com")),
        browser=rng.choice(("Chrome", "Firefox", "Safari")),
        is_bot=rng.random() < 0.05,
    )


async def fill(env: dict[str, str], projection: str, n: int) -> float:
    store = await open_store(load_config(env))
    rng = random.Random(7)
    started = time.perf_counter()
    try:
        for i in range(0, n, PER_TX):
            async with store.transaction() as tx:
                await tx.append(
                    *(make_event(projection, j, n, rng) for j in range(i, min(n, i + PER_TX)))
                )
    finally:
        await store.close()
    return time.perf_counter() - started


def replay(env: dict[str, str], projection: str) -> tuple[float, int, str]:
    """Seconds, peak RSS in KiB and the output of ``sluice replay``."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "sluice", "replay", projection, "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert child.stdout is not None
    output = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"sluice replay failed ({child.returncode}):\n{output}")
    return elapsed, usage.ru_maxrss, output


def main(args: argparse.Namespace) -> None:
    stores = parse_stores(args.store)
    results: dict[str, tuple[float, float, int, str]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "redis") as server,
        Stores(stores) as pg,
    ):
        for store in stores:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
            env.update(
                SLUICE_REDIS_URL=server.url, SLUICE_LOG_LEVEL="info", SLUICE_LOG_FORMAT="json"
            )
            env.update(pg.env(store, Path(tmp) / f"data-{store}"))
            try:
                filled = asyncio.run(fill(env, args.projection, args.n))
                print(f"{store}: appended {args.n:,} events in {filled:.1f} s", flush=True)
                seconds, peak_kib, output = replay(env, args.projection)
            finally:
                pg.drop(env)
            print(
                f"{store}: replayed in {seconds:.1f} s: {args.n / seconds:,.0f} events/s",
                flush=True,
            )
            results[store] = (filled, seconds, peak_kib, output)
        label = pg.label()
    kind = "ArticleViewed" if args.projection == "article-views" else "LinkVisited"
    rows = {
        "history appended (5,000 per transaction)": [f"{results[s][0]:.1f} s" for s in results],
        "replay wall time (process start to exit)": [f"{results[s][1]:.1f} s" for s in results],
        "events/s": [f"**{args.n / results[s][1]:,.0f}**" for s in results],
        "target (docs/benchmarks.md)": [f">= {TARGETS[s]:,}" for s in results],
        "of the target": [
            f"{args.n / results[s][1] / TARGETS[s]:.2f}"
            f" ({'met' if args.n / results[s][1] >= TARGETS[s] else 'missed'})"
            for s in results
        ],
        "peak RSS of the replaying process": [f"{results[s][2] / 1024:.0f} MiB" for s in results],
    }
    lines = [
        f"{args.n:,} `{kind}` events, `sluice replay {args.projection}` in a child process:",
        "",
        "| figure | " + " | ".join(results) + " |",
        "|---|" + "---|" * len(results),
        *(f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()),
        "",
    ]
    for s, (*_, output) in results.items():
        size = "".join(line for line in output.splitlines() if "rebuilt from" in line)
        lines.append(f"Its output ({s}): `{size.strip()}`  ")
    table = "\n".join(lines).rstrip()
    print(table)
    if not args.no_readme:
        record(
            f"replay-{args.projection}",
            f"replay.py: `sluice replay {args.projection}`",
            table,
            extra=label,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=1_000_000)
    parser.add_argument(
        "--projection", choices=("article-views", "link-stats"), default="article-views"
    )
    parser.add_argument("--store", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--no-readme", action="store_true")
    main(parser.parse_args())
