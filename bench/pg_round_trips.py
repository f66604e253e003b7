"""The producer's append on PostgreSQL: events/s, CPU and round trips per transaction, of
this tree and of another (a worktree of an older commit), in turns (issue 45,
bench/README.md).

Run by hand: ``.venv/bin/python bench/pg_round_trips.py [--other /path/to/tree]
[--turns 3] [--transactions 200]``. One private PostgreSQL server (``bench/stores.py``,
fsync on); each measurement is a child process on a fresh database, importing sluice
from its tree (``PYTHONPATH``), that commits ``--transactions`` transactions of 500
``ArticleViewed`` one at a time, as ``bench/peers_py/sluice_side.py produce`` does (the
relay's Redis wake-up left out), timed (wall clock; CPU of the producer and of its
PostgreSQL backend), then 20 more through a loopback proxy that counts round trips: the
times the client speaks again after the server answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stores import Stores

HERE = Path(__file__).resolve()
PER_TX = 500
COUNTED = 20  # transactions through the proxy
_BACKENDS = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE datname = current_database() AND backend_type = 'client backend'"
)


def _cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds of these processes so far (/proc/PID/stat)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


class TurnCounter:
    """A TCP proxy to ``target`` counting the client's turns to speak."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.turns = 0
        self._client_spoke_last = False

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, client: bool) -> None:
            while data := await src.read(65536):
                if client and not self._client_spoke_last:
                    self.turns += 1
                self._client_spoke_last = client
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(
            pipe(reader, up_writer, True), pipe(up_reader, writer, False), return_exceptions=True
        )


async def _commit(store: object, first: int, n: int) -> None:
    from sluice.builtin.articles.events import ArticleViewed

    for i in range(first, first + n * PER_TX, PER_TX):
        async with store.transaction() as tx:  # type: ignore[attr-defined]
            await tx.append(
                *(
                    ArticleViewed(article_id=f"a{j % 50}", viewer=str(j))
                    for j in range(i, i + PER_TX)
                )
            )


async def child(url: str, transactions: int) -> dict[str, float]:
    from urllib.parse import urlsplit, urlunsplit

    from sluice.app.assembly import open_store
    from sluice.config import load_config

    config = load_config(os.environ)
    store = await open_store(config)
    try:
        await _commit(store, 0, 10)  # warm: the pool, COPY's prepared statement
        backends = [int(pid) for (pid,) in await store.fetchall(_BACKENDS)]
        started, cpu, server = time.perf_counter(), time.process_time(), _cpu_s(backends)
        await _commit(store, 10 * PER_TX, transactions)
        events = transactions * PER_TX
        rate = events / (time.perf_counter() - started)
        cpu_us = (time.process_time() - cpu) / events * 1e6
        server_us = (_cpu_s(backends) - server) / events * 1e6
    finally:
        await store.close()
    parts = urlsplit(url)
    counter = TurnCounter(parts.hostname or "127.0.0.1", parts.port or 5432)
    proxy = await asyncio.start_server(counter.serve, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    netloc = parts.netloc.replace(f":{parts.port}", f":{port}")
    os.environ["SLUICE_DATABASE_URL"] = urlunsplit(parts._replace(netloc=netloc))
    store = await open_store(load_config(os.environ))
    try:
        await _commit(store, 0, 1)
        before = counter.turns
        await _commit(store, (10 + transactions) * PER_TX, COUNTED)
        trips = (counter.turns - before) / COUNTED
    finally:
        await store.close()
        proxy.close()
    return {
        "events_per_s": rate,
        "cpu_us_per_event": cpu_us,
        "server_us_per_event": server_us,
        "round_trips_per_tx": trips,
    }


def measure(stores: Stores, tree: Path, transactions: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, **stores.env("postgres", Path(tmp) / "data"))
        env["PYTHONPATH"] = str(tree)
        env.setdefault("SLUICE_REDIS_URL", "redis://127.0.0.1:1/0")  # never used
        try:
            out = subprocess.run(
                [sys.executable, str(HERE), "--child", str(transactions)],
                env=env,
                cwd=HERE.parent,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        finally:
            stores.drop(env)
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--other", type=Path, help="another tree, measured in turns with this")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        url = os.environ["SLUICE_DATABASE_URL"]
        print(json.dumps(asyncio.run(child(url, args.child))), flush=True)
        return
    trees = [("this", HERE.parent.parent)] + ([("other", args.other)] if args.other else [])
    with Stores(["postgres"]) as stores:
        for turn in range(1, args.turns + 1):
            for name, tree in trees if turn % 2 else trees[::-1]:
                r = measure(stores, tree, args.transactions)
                print(
                    f"turn {turn} {name:5} ({tree}): {r['events_per_s']:,.0f} events/s,"
                    f" CPU per event: producer {r['cpu_us_per_event']:.2f} us,"
                    f" its PostgreSQL backend {r['server_us_per_event']:.2f} us;"
                    f" {r['round_trips_per_tx']:.1f} round trips per transaction of {PER_TX}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
