"""Append throughput of N writer processes (the API's group commit), and whether the relay keeps up.

Run by hand: ``.venv/bin/python bench/append.py [--writers 1,4,16] [--duration 10]
[--store sqlite,postgres] [--batch 500] [--no-readme]``.

docs/benchmarks.md: on PostgreSQL at least 50,000 events/s with 4 concurrent writer
processes, and the relay never slower than the writers. Starts its own Redis
and (for ``postgres``) its own PostgreSQL server with fsync on
(``bench/stores.py``); SQLite runs with its production ``synchronous=FULL``.

For each store and each writer count, two measurements, each on a fresh,
migrated store and an empty Redis:

- *writers + relay*: one ``sluice relay`` process (the real one, same
  environment) runs while N writer processes append for ``--duration``
  seconds; the main process samples ``max(seq)`` and the relay's stored
  position every 0.25 s, so the backlog (``max(seq) - position``) is read over
  time, at the moment the writers stop, and how long the relay needs after
  that to catch up.
- *writers alone, then relay alone*: the same writers with no relay; then the
  relay starts and drains the whole history: its publish rate alone.

Each writer process is what the API's visit writer (``VisitRecorder``) does at
full load: a batch of ``--batch`` (500) ``LinkVisited`` (codes over 1,000
links, 64-hex-digit visitor hashes, a referrer, a browser) in one
``async with store.transaction() as tx: await tx.append(*batch)``, one
transaction at a time, the relay woken after each commit by the API's
``CommitNotifier``. Building the events (UUIDv7 ids, the structs) happens in
the writer between transactions, as in the API; the writers report how much
of their time that took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as aioredis
from children import spawn, stop
from readme import record
from stores import STORES, Stores, parse_stores

from sluice.app.assembly import open_store
from sluice.builtin.links.events import LinkVisited
from sluice.config import load_config
from sluice.embedded.redis_server import RedisServer
from sluice.store import Store

TARGET = 50_000  # events/s on PostgreSQL with 4 writers
SAMPLE_S = 0.25


# --- one writer process ---------------------------------------------------------------------


async def write(start_at: float, duration: float, batch: int) -> dict[str, float]:
    from sluice.process.resources import redis_client
    from sluice.relay.notify import CommitNotifier
    from sluice.streams.engine_keys import Keys

    config = load_config()
    store = await open_store(config)
    redis = redis_client(config)
    notifier = CommitNotifier(redis, Keys(config.stream_prefix).outbox_channel())
    store.add_commit_listener(notifier.notify)
    rng = random.Random(os.getpid())
    visitors = [f"{rng.getrandbits(256):064x}" for _ in range(5_000)]
    referrers = (None, None, "example.com", "news.ycombinator.com", "t.co")
    browsers = ("Chrome", "Firefox", "Safari", "Edge", "Other")
    events = transactions = 0
    build_s = commit_s = 0.0
    first = last = 0.0
    try:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        end_at = start_at + duration
        while (now := time.time()) < end_at:
            t0 = time.perf_counter()
            visits = [
                LinkVisited(
                    code=f"c{rng.randrange(1000):05d}",
                    visitor=rng.choice(visitors),
                    referrer_host=rng.choice(referrers),
                    browser=rng.choice(browsers),
                    is_bot=rng.random() < 0.03,
                )
                for _ in range(batch)
            ]
            t1 = time.perf_counter()
            async with store.transaction() as tx:
                await tx.append(*visits)
            t2 = time.perf_counter()
            build_s += t1 - t0
            commit_s += t2 - t1
            events += len(visits)
            transactions += 1
            first = first or now
            last = time.time()
    finally:
        await notifier.close()
        await redis.publish(Keys(config.stream_prefix).outbox_channel(), b"1")
        await redis.aclose()
        await store.close()
    return {
        "events": events,
        "transactions": transactions,
        "build_s": build_s,
        "commit_s": commit_s,
        "first": first,
        "last": last,
    }


# --- the driver -----------------------------------------------------------------------------


@dataclass
class Trial:
    store: str
    writers: int
    relay: bool  # a relay ran alongside the writers
    events: int = 0
    transactions: int = 0
    seconds: float = 0.0  # first transaction started to last commit
    build_share: float = 0.0  # of the writers' time, building events
    backlog_at_end: int = 0  # when the writers stopped (relay alongside)
    max_backlog: int = 0
    catch_up_s: float = 0.0  # after the writers stopped, until the relay had published all
    relay_rate: float = 0.0  # events/s the relay published (alongside: over the writing window)
    relay_drain_rate: float = 0.0  # alone, draining the history afterwards
    start_at: float = 0.0  # wall time the writers began
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, max seq, position)
    error: str = ""

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


async def sample(store: Store, pause: float = 0.0) -> tuple[float, int, int]:
    if pause:
        await asyncio.sleep(pause)
    head = await store.fetchone("SELECT COALESCE(MAX(seq), 0) FROM events")
    position = await store.position("relay")
    return time.time(), int(head[0]) if head else 0, position


async def wait_relay(store: Store, trial: Trial, head: int, limit_s: float) -> float:
    """Until the relay's position reaches ``head``; the time it did, or 0 after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        at, _, position = await sample(store)
        trial.samples.append((at, head, position))
        if position >= head:
            return at
        await asyncio.sleep(0.05)
    return 0.0


async def run_trial(
    trial: Trial, env: dict[str, str], server: RedisServer, args: argparse.Namespace, logs: Path
) -> None:
    store = await open_store(load_config(env))  # migrates the fresh store, once
    relay = spawn(["relay"], env, logs / "relay.log") if trial.relay else None
    try:
        if relay is not None:
            await asyncio.sleep(1.5)  # the relay takes its lock and reconciles the empty store
        start_at = time.time() + 2.0 + 0.1 * trial.writers  # after every writer opened its store
        trial.start_at = start_at
        command = [
            sys.executable,
            __file__,
            "--writer",
            str(start_at),
            str(args.duration),
            str(args.batch),
        ]
        # Started before the clock runs: a blocking Popen does not bias the figures.
        writers = [
            subprocess.Popen(  # noqa: ASYNC220
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=(logs / f"writer{k}.log").open("ab"),
            )
            for k in range(trial.writers)
        ]
        while any(w.poll() is None for w in writers):
            trial.samples.append(await sample(store, SAMPLE_S))
        outputs = []
        for w in writers:
            out = w.stdout.read().decode() if w.stdout else ""
            if w.returncode != 0 or not out.strip():
                tail = (logs / f"writer{writers.index(w)}.log").read_text()[-800:]
                raise RuntimeError(f"writer exited {w.returncode}: {tail}")
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        trial.events = sum(int(o["events"]) for o in outputs)
        trial.transactions = sum(int(o["transactions"]) for o in outputs)
        stopped = max(o["last"] for o in outputs)
        trial.seconds = stopped - min(o["first"] for o in outputs if o["first"])
        busy = sum(o["build_s"] + o["commit_s"] for o in outputs)
        trial.build_share = sum(o["build_s"] for o in outputs) / busy if busy else 0.0
        _, head, position = await sample(store)
        if head != trial.events:
            raise RuntimeError(f"{trial.events} events appended but max(seq) is {head}")
        if relay is not None:
            during = [s for s in trial.samples if s[0] <= stopped]
            trial.max_backlog = max((h - p for _, h, p in during), default=0)
            trial.backlog_at_end = head - position
            done_at = await wait_relay(store, trial, head, args.relay_timeout)
            trial.catch_up_s = done_at - stopped if done_at else float("inf")
            first = min(o["first"] for o in outputs if o["first"])
            trial.relay_rate = head / (max(done_at, stopped) - first) if done_at else 0.0
        else:
            relay = spawn(["relay"], env, logs / "relay.log")
            trial.samples.clear()
            done_at = await wait_relay(store, trial, head, args.relay_timeout)
            # From its first stored position (its start, imports and first batch left
            # out) to its last.
            t_first, _, p_first = next(s for s in trial.samples if s[2] > 0)
            moved = done_at - t_first
            trial.relay_drain_rate = (head - p_first) / moved if done_at and moved > 0 else 0.0
    finally:
        if relay is not None:
            stop(relay)
        await store.close()
        client = aioredis.from_url(server.url)
        await client.flushall()
        await client.aclose()


def fmt_backlog(trial: Trial) -> str:
    """The backlog at every second of the writing window, then at its end."""
    points, next_mark = [], 1.0
    for at, head, position in trial.samples:
        if at - trial.start_at >= next_mark:
            points.append(f"{head - position:,}")
            next_mark += 1.0
    return " ".join(points)


def table(trials: list[Trial], args: argparse.Namespace) -> str:
    lines = [
        f"Each writer: transactions of {args.batch} `LinkVisited`, one at a time, for"
        f" {args.duration:g} s; events/s = events committed / (first transaction started"
        " to last commit, over all writers).",
        "",
        "| store | writers | writers alone, events/s | building events (share of writer time) |"
        " relay alone, draining, events/s | writers with relay alongside, events/s |"
        " relay alongside, events/s | backlog when writers stopped | max backlog |"
        " relay caught up after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {(t.store, t.writers, t.relay): t for t in trials}
    for store in STORES:
        for n in args.writer_counts:
            alone, along = by.get((store, n, False)), by.get((store, n, True))
            if alone is None and along is None:
                continue
            cells = [store, str(n)]
            if alone is None or alone.error:
                cells += [f"failed: {alone.error[:120]!r}" if alone else "-", "", ""]
            else:
                cells += [
                    f"{alone.rate:,.0f}",
                    f"{alone.build_share:.0%}",
                    f"{alone.relay_drain_rate:,.0f}",
                ]
            if along is None or along.error:
                cells += [f"failed: {along.error[:120]!r}" if along else "-", "", "", "", ""]
            else:
                caught = (
                    f"{along.catch_up_s:.1f} s"
                    if along.catch_up_s != float("inf")
                    else f"not within {args.relay_timeout:g} s"
                )
                cells += [
                    f"{along.rate:,.0f}",
                    f"{along.relay_rate:,.0f}",
                    f"{along.backlog_at_end:,}",
                    f"{along.max_backlog:,}",
                    caught,
                ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Backlog (max(seq) - relay position), relay alongside, each second from the"
        f" writers' start (they stop after {args.duration:g} s) until the relay caught up:",
        "",
    ]
    for t in trials:
        if t.relay and not t.error:
            lines.append(
                f"- {t.store}, {t.writers} writer{'s' * (t.writers > 1)}: {fmt_backlog(t)}"
            )
    alone, along = by.get(("postgres", 4, False)), by.get(("postgres", 4, True))
    if alone is not None and not alone.error:
        lines += [
            "",
            f"PostgreSQL, 4 writers alone: **{alone.rate:,.0f} events/s**"
            f" ({alone.rate / TARGET:.2f} of the target, >= {TARGET:,})",
        ]
    if along is not None and not along.error:
        lines.append(
            f"PostgreSQL, 4 writers with the relay alongside: **{along.rate:,.0f} events/s**"
            f" ({along.rate / TARGET:.2f} of the target); the relay published"
            f" {along.relay_rate:,.0f} events/s, backlog {along.backlog_at_end:,} when the"
            f" writers stopped (max {along.max_backlog:,})"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    stores = parse_stores(args.store)
    trials: list[Trial] = []
    with (
        tempfile.TemporaryDirectory() as tmp_name,
        RedisServer(Path(tmp_name) / "redis") as server,
        Stores(stores, fsync=not args.no_fsync) as pg,
    ):
        tmp = Path(tmp_name)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "BENCH_"))}
        base.update(
            SLUICE_REDIS_URL=server.url, SLUICE_LOG_LEVEL="warning", SLUICE_LOG_FORMAT="json"
        )
        k = 0
        for store in stores:
            for n in args.writer_counts:
                for relay in (True, False):
                    k += 1
                    trial = Trial(store, n, relay)
                    logs = tmp / f"logs{k}"
                    logs.mkdir()
                    env = {**base, **pg.env(store, tmp / f"data{k}")}
                    try:
                        await run_trial(trial, env, server, args, logs)
                    except RuntimeError as exc:
                        trial.error = str(exc)
                    finally:
                        pg.drop(env)
                    note = trial.error or (
                        f"{trial.rate:,.0f} events/s"
                        + (
                            f", relay {trial.relay_rate:,.0f}/s, backlog at end"
                            f" {trial.backlog_at_end:,}, caught up after {trial.catch_up_s:.1f} s"
                            if relay
                            else f", relay alone {trial.relay_drain_rate:,.0f}/s"
                        )
                    )
                    print(
                        f"{store}, {n} writers, relay {'alongside' if relay else 'after'}: {note}",
                        flush=True,
                    )
                    trials.append(trial)
        label = pg.label()
    text = table(trials, args)
    print(text)
    if not args.no_readme:
        record(
            "append",
            "append.py: group-commit append, N writer processes, and the relay",
            text,
            extra=label,
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        result = asyncio.run(write(float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])))
        print(json.dumps(result), flush=True)
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default="1,4,16", help="writer processes, comma-separated")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of appending")
    parser.add_argument("--store", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--batch", type=int, default=500, help="events per transaction")
    parser.add_argument("--relay-timeout", type=float, default=120.0)
    parser.add_argument("--no-fsync", action="store_true", help="PostgreSQL with fsync off")
    parser.add_argument("--no-readme", action="store_true")
    options = parser.parse_args()
    options.writer_counts = [int(n) for n in options.writers.split(",")]
    asyncio.run(main(options))
