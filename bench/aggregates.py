"""Event-sourced aggregates (docs/concepts/aggregates.md): load time, save throughput, contention.

Run by hand: ``.venv/bin/python bench/aggregates.py [--store sqlite,postgres]
[--seconds 5] [--no-readme]``. Each store is fresh and migrated (SQLite with
``synchronous=FULL``; PostgreSQL a private server with fsync on, ``bench/stores.py``).
The aggregate is ``Tally``, the views of one article (``ArticleViewed``, the articles
app's events), folded into a count and the last viewer.

- **Load**: one aggregate of 10, 100, 1,000 and 10,000 events; the median of 7 loads
  from the store with its snapshots (every 100 events: the newest and at most 99 events
  after it) and without (a class of another state version, which sets them aside and
  folds every event).
- **Save**: ``--seconds`` of one-event transactions, one after the other: a new
  aggregate saved per transaction, against the same event appended with ``tx.append``
  (the ratio is what an aggregate's version row and check cost); then 100 per
  transaction, as a batch of work would (``save_all``: one insert of the versions, one
  append).
- **Contention**: 8 writers at once for ``--seconds``, each loading, recording one
  event and saving in a transaction of its own, again on conflict
  (``retry_on_conflict``): all on one aggregate, then each on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ClassVar

from readme import record
from stores import Stores, parse_stores

from sluice.app import Aggregate, Tx, VersionConflict, applies, retry_on_conflict, save_all
from sluice.app.assembly import open_store
from sluice.builtin.articles.events import ArticleViewed
from sluice.config import load_config
from sluice.store import Store

SIZES = (10, 100, 1_000, 10_000)
LOADS = 7
WRITERS = 8


class Tally(Aggregate):
    aggregate: ClassVar[str] = "articles"
    count: int = 0
    last_viewer: str = ""

    @applies(ArticleViewed)
    def _viewed(self, event: ArticleViewed) -> None:
        self.count += 1
        self.last_viewer = event.viewer

    def view(self, viewer: str) -> None:
        self.record(ArticleViewed(article_id=self.id, viewer=viewer))


class Unsnapped(Tally):
    state_version: ClassVar[int] = 2  # sets every snapshot of Tally aside


async def _save(store: Store, aggregate: Aggregate) -> None:
    async with store.transaction() as tx:
        await aggregate.save(tx)


async def loads(store: Store) -> list[tuple[int, float, float]]:
    """(events, ms with snapshots, ms without) per size."""
    rows = []
    for size in SIZES:
        tally = Tally(f"load-{size}")
        for start in range(0, size, 1000):
            for n in range(start, min(size, start + 1000)):
                tally.view(f"v{n}")
            await _save(store, tally)
        timed = []
        for cls in (Tally, Unsnapped):
            times = []
            for _ in range(LOADS):
                began = time.perf_counter()
                loaded = await cls.load(store, tally.id)
                times.append(time.perf_counter() - began)
                assert loaded.count == size
            timed.append(statistics.median(times) * 1000)
        rows.append((size, timed[0], timed[1]))
    return rows


async def _rate(seconds: float, step: Callable[[int], Awaitable[int]]) -> float:
    """Events per second of ``step(n)`` (which returns the events it committed)."""
    began, done, n = time.perf_counter(), 0, 0
    while time.perf_counter() - began < seconds:
        done += await step(n)
        n += 1
    return done / (time.perf_counter() - began)


async def saves(store: Store, seconds: float, per_tx: int) -> tuple[float, float]:
    """(aggregate saves/s, plain appends/s) with ``per_tx`` events per transaction."""

    async def saved(n: int) -> int:
        tallies = [Tally(f"save-{per_tx}-{n}-{k}") for k in range(per_tx)]
        for tally in tallies:
            tally.view("v")
        async with store.transaction() as tx:
            await save_all(tx, *tallies)
        return per_tx

    async def appended(n: int) -> int:
        async with store.transaction() as tx:
            await tx.append(
                *(
                    ArticleViewed(article_id=f"append-{per_tx}-{n}-{k}", viewer="v")
                    for k in range(per_tx)
                )
            )
        return per_tx

    return await _rate(seconds, saved), await _rate(seconds, appended)


async def contention(store: Store, seconds: float, hot: bool) -> tuple[float, int]:
    """(saves/s of 8 writers, conflicts met) on one aggregate (``hot``) or 8."""
    conflicts = 0
    if hot:
        first = Tally("hot")
        first.view("first")
        await _save(store, first)

    async def writer(w: int) -> int:
        nonlocal conflicts
        ident = "hot" if hot else f"own-{w}"
        done, deadline = 0, time.perf_counter() + seconds

        async def command(tx: Tx) -> None:
            tally = await Tally.find(tx, ident) or Tally(ident)
            tally.view(f"w{w}")
            await tally.save(tx)

        while time.perf_counter() < deadline:
            try:
                await retry_on_conflict(store, command, attempts=1)
            except VersionConflict:
                conflicts += 1
                continue
            done += 1
        return done

    began = time.perf_counter()
    done = sum(await asyncio.gather(*(writer(w) for w in range(WRITERS))))
    return done / (time.perf_counter() - began), conflicts


async def run(store_kind: str, stores: Stores, seconds: float) -> str:
    with tempfile.TemporaryDirectory() as data:
        env = stores.env(store_kind, Path(data))
        config = load_config(env)
        store = await open_store(config)
        try:
            lines = [
                f"**{store_kind}**",
                "",
                "| events | load, snapshots (ms) | load, every event (ms) |",
                "|---:|---:|---:|",
            ]
            for size, snapped, folded in await loads(store):
                lines.append(f"| {size:,} | {snapped:.2f} | {folded:.2f} |")
            lines += [
                "",
                "| per transaction | aggregate saves/s | appends/s | ratio |",
                "|---:|---:|---:|---:|",
            ]
            for per_tx in (1, 100):
                saved, appended = await saves(store, seconds, per_tx)
                lines.append(
                    f"| {per_tx} | {saved:,.0f} | {appended:,.0f} | {saved / appended:.2f} |"
                )
            hot, hot_conflicts = await contention(store, seconds, hot=True)
            spread, spread_conflicts = await contention(store, seconds, hot=False)
            lines += [
                "",
                f"| {WRITERS} writers | saves/s | conflicts met |",
                "|---|---:|---:|",
                f"| one hot aggregate | {hot:,.0f} | {hot_conflicts:,} |",
                f"| one aggregate each | {spread:,.0f} | {spread_conflicts:,} |",
            ]
            return "\n".join(lines)
        finally:
            await store.close()
            stores.drop(env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=parse_stores, default=["sqlite", "postgres"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    with Stores(args.store) as stores:
        text = "\n\n".join(asyncio.run(run(kind, stores, args.seconds)) for kind in args.store)
        label = stores.label()
    print(text)
    if not args.no_readme:
        record("aggregates", "aggregates.py: event-sourced aggregates", text, extra=label)


if __name__ == "__main__":
    main()
