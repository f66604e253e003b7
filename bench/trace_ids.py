"""What a visit's commit costs as the history grows: random trace ids against
time-ordered ones (``sluice.events.new_trace_id``).

Run by hand: ``.venv/bin/python bench/trace_ids.py [--visits 1000000] [--store
sqlite,postgres] [--no-readme]``.

Every redirect records a ``LinkVisited`` carrying its request's trace id, and the
events table has an index by trace id (event search, migration 15). A trace id drawn
at random lands anywhere in that index, so once the index outgrows the store's page
cache each insert reads and dirties a page of its own. For each store and each kind of
id, one process on a fresh store appends ``--visits`` visits as the API's visit writer
does (transactions of 500 ``LinkVisited`` through ``store.transaction()``), every
visit with a trace id of its own, and the commit time per visit is read over each
tenth of the run. No Redis: nothing is published, only the append is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from readme import record
from stores import Stores, parse_stores
from visits import Visits, random_trace_id

from sluice.app.assembly import open_store
from sluice.config import load_config
from sluice.events import new_trace_id

BATCH = 500

KINDS: dict[str, Callable[[], str]] = {"random": random_trace_id, "time-ordered": new_trace_id}


async def append(env: dict[str, str], visits: int, trace_id: Callable[[], str]) -> list[float]:
    """Microseconds of commit per visit over each tenth of ``visits``."""
    store = await open_store(load_config(env))
    made = Visits("c0", trace_id)
    tenth = visits // 10
    windows: list[float] = []
    spent = 0.0
    try:
        for done in range(0, visits, BATCH):
            batch = made.batch(BATCH)
            started = time.perf_counter()
            async with store.transaction() as tx:
                await tx.append(*batch)
            spent += time.perf_counter() - started
            if (done + BATCH) % tenth == 0:
                windows.append(spent / tenth * 1e6)
                spent = 0.0
    finally:
        await store.close()
    return windows


def table(rows: list[tuple[str, str, list[float]]], visits: int) -> str:
    tenths = [f"{(i + 1) * visits // 10:,}" for i in range(10)]
    lines = [
        f"Commit time per visit (µs), transactions of {BATCH} `LinkVisited`, each with a"
        " trace id of its own, over each tenth of the run (history size at its end):",
        "",
        "| store | trace ids | " + " | ".join(tenths) + " | last / first |",
        "|---|---|" + "---|" * 11,
    ]
    for store, kind, windows in rows:
        cells = " | ".join(f"{w:.1f}" for w in windows)
        lines.append(f"| {store} | {kind} | {cells} | {windows[-1] / windows[0]:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=1_000_000)
    parser.add_argument("--store", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    if args.visits % (10 * BATCH):
        raise SystemExit(f"--visits: a multiple of {10 * BATCH}")
    rows: list[tuple[str, str, list[float]]] = []
    with Stores(parse_stores(args.store)) as stores, tempfile.TemporaryDirectory() as tmp:
        for store in stores.stores:
            for kind, make in KINDS.items():
                env = stores.env(store, Path(tmp) / f"{store}-{kind}")
                try:
                    windows = asyncio.run(append(env, args.visits, make))
                finally:
                    stores.drop(env)
                print(f"{store}, {kind}: " + ", ".join(f"{w:.1f}" for w in windows), flush=True)
                rows.append((store, kind, windows))
        label = stores.label()
    text = table(rows, args.visits)
    print(text)
    if not args.no_readme:
        record(
            "trace_ids",
            "trace_ids.py: a visit's commit as the history grows, by trace id",
            text,
            extra=label,
        )


if __name__ == "__main__":
    sys.exit(main())
