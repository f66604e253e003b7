"""One-shot reminders: N pending, M due in the same second, fired by real schedulers (docs/guides/tasks.md).

Run by hand: ``.venv/bin/python bench/one_shots.py [--pending N] [--due M]
[--schedulers K] [--store sqlite,postgres] [--no-readme]`` (defaults 1,000,000,
10,000, 2, both stores). For each store it writes N pending one-shots due between
an hour and a year ahead (never during the run), 20,000 per transaction, starts
K ``sluice scheduler`` processes (its own Redis), waits until each one's runners
run, then commits M one-shots all due at the same whole second, a few seconds
ahead, and waits until they have fired. Each must have exactly one
``ReminderDue`` (counted per reminder) and no other one-shot may have fired.
Lateness is the commit of a one-shot's ``ReminderDue`` (its history row's
``created_at``, stamped just before COMMIT) minus its ``at``: p50, p99 and max.
Also timed: the schedulers' per-tick question (the earliest pending instant) with
N rows pending. Writes its figures to its section of bench/README.md
(``--no-readme``: don't).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from readme import record
from stores import Stores, parse_stores

from sluice.app.assembly import open_store
from sluice.builtin.reminders import one_shots
from sluice.config import load_config
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow, uuid7
from sluice.store import Store
from sluice.store.users import User, db_time, from_db_time, insert_user

PER_TX = 20_000
USERS = 100
LEAD = timedelta(seconds=4)  # from the due rows' commit to their instant
COLUMNS = ("id", "owner_id", "cron", "timezone", "text", "created_at", "at", "due_at")


def rows(owners: list[str], instants: list[datetime]) -> list[tuple[str, ...]]:
    now = db_time(utcnow())
    return [
        (uuid7(), owners[i % len(owners)], "", "", f"order {i}", now, db_time(at), db_time(at))
        for i, at in enumerate(instants)
    ]


async def fill(store: Store, pending: int) -> tuple[list[str], float]:
    """Users, then ``pending`` one-shots due an hour to a year ahead; the owners, seconds."""
    started = time.perf_counter()
    owners = [uuid7() for _ in range(USERS)]
    async with store.transaction() as tx:
        for i, owner in enumerate(owners):
            user = User(id=owner, email=f"u{i}@example.org", name=None, created_at=utcnow())
            await insert_user(tx, user, "-")
    rng, now = random.Random(7), utcnow()
    for start in range(0, pending, PER_TX):
        instants = [
            now + timedelta(seconds=rng.uniform(3600, 365 * 86400))
            for _ in range(min(PER_TX, pending - start))
        ]
        await store.insert_rows("reminders", COLUMNS, rows(owners, instants))
    return owners, time.perf_counter() - started


async def tick_cost(store: Store, times: int = 200) -> float:
    """Milliseconds of one ``next_due`` (what every idle tick asks)."""
    started = time.perf_counter()
    for _ in range(times):
        await one_shots.next_due(store)
    return (time.perf_counter() - started) * 1000 / times


async def fire(store: Store, owners: list[str], due: int) -> tuple[datetime, list[str]]:
    """Commit ``due`` one-shots at one whole second ``LEAD`` ahead; that second, the ids."""
    at = (utcnow() + LEAD).replace(microsecond=0)
    batch = rows(owners, [at] * due)
    await store.insert_rows("reminders", COLUMNS, batch)
    return at, [row[0] for row in batch]


async def results(store: Store, at: datetime, ids: list[str]) -> tuple[list[float], int, int]:
    """Lateness (s) of each first firing, reminders fired other than once, others fired."""
    counts: dict[str, int] = {}
    late: list[float] = []
    wanted = set(ids)
    after = 0
    while batch := await store.events_after(after, 50_000, types=["ReminderDue"]):
        for row in batch:
            reminder_id = row.payload.split(b'"reminder_id":"', 1)[1].split(b'"', 1)[0].decode()
            counts[reminder_id] = counts.get(reminder_id, 0) + 1
            if reminder_id in wanted and counts[reminder_id] == 1:
                late.append((from_db_time(row.created_at) - at).total_seconds())
        after = batch[-1].seq
    wrong = sum(1 for i in ids if counts.get(i) != 1)
    return late, wrong, len(counts.keys() - wanted)


def start_schedulers(env: dict[str, str], count: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    children = []
    for i in range(count):
        with (logs / f"scheduler-{i}.log").open("wb") as log:
            command = [sys.executable, "-m", "sluice", "scheduler"]
            children.append(
                subprocess.Popen(command, env=env, stderr=log, stdout=subprocess.DEVNULL)
            )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        texts = [(logs / f"scheduler-{i}.log").read_text() for i in range(count)]
        if all("one-shot runner started" in t for t in texts):
            return children
        time.sleep(0.1)
    raise SystemExit("the schedulers did not start within 60 s")


async def run_store(env: dict[str, str], args: argparse.Namespace, logs: Path) -> dict[str, str]:
    store = await open_store(load_config(env))
    children: list[subprocess.Popen[bytes]] = []
    try:
        owners, filled = await fill(store, args.pending)
        print(f"  {args.pending:,} pending written in {filled:.1f} s", flush=True)
        tick_ms = await tick_cost(store)
        children = start_schedulers(env, args.schedulers, logs)
        at, ids = await fire(store, owners, args.due)
        deadline = time.monotonic() + LEAD.total_seconds() + 120
        while time.monotonic() < deadline:
            row = await store.fetchone(
                "SELECT COUNT(*) FROM reminders WHERE due_at IS NOT NULL AND due_at <= ?",
                (db_time(at),),
            )
            if row is not None and int(row[0]) == 0:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)  # a second firing, were there one, would show now
        late, wrong, others = await results(store, at, ids)
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(30)
        await store.close()
    late.sort()
    p = statistics.quantiles(late, n=100) if len(late) > 1 else late * 99
    return {
        "pending written": f"{args.pending:,} in {filled:.1f} s",
        "earliest pending instant (each tick)": f"{tick_ms:.2f} ms",
        "fired (of due)": f"{len(late):,} of {args.due:,}",
        "fired other than once / others fired": f"{wrong} / {others}",
        "lateness p50": f"**{p[49] * 1000:.0f} ms**",
        "lateness p99": f"**{p[98] * 1000:.0f} ms**",
        "lateness max": f"{late[-1] * 1000:.0f} ms" if late else "-",
    }


def main(args: argparse.Namespace) -> None:
    stores = parse_stores(args.store)
    figures: dict[str, dict[str, str]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "redis") as server,
        Stores(stores) as pg,
    ):
        for store in stores:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
            env.update(
                SLUICE_REDIS_URL=server.url,
                SLUICE_LOG_LEVEL="info",
                SLUICE_LOG_FORMAT="json",
                SLUICE_CODE_POOL_TARGET="1000",
            )
            env.update(pg.env(store, Path(tmp) / f"data-{store}"))
            logs = Path(tmp) / f"logs-{store}"
            logs.mkdir()
            print(f"{store}:", flush=True)
            try:
                figures[store] = asyncio.run(run_store(env, args, logs))
            finally:
                pg.drop(env)
            for name, value in figures[store].items():
                print(f"  {name}: {value}", flush=True)
        label = pg.label()
    names = list(next(iter(figures.values())))
    table = "\n".join(
        [
            f"{args.pending:,} pending one-shots, {args.due:,} due in the same second, "
            f"{args.schedulers} `sluice scheduler` processes:",
            "",
            "| figure | " + " | ".join(figures) + " |",
            "|---|" + "---|" * len(figures),
            *(f"| {n} | " + " | ".join(f[n] for f in figures.values()) + " |" for n in names),
        ]
    )
    print(table)
    if not args.no_readme:
        record("one-shots", "one_shots.py: one-shot reminders due together", table, extra=label)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--schedulers", type=int, default=2)
    parser.add_argument("--store", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--no-readme", action="store_true")
    main(parser.parse_args())
