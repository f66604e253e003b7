"""Pipeline throughput: append -> relay -> article-views projection, and the relay vs XADD.

Run by hand: ``.venv/bin/python bench/pipeline.py [N] [--log-level warning]``.
Starts its own Redis on a free loopback port and a store in a temporary
directory, then times, one stage at a time in this one process:

- append: N ``ArticleViewed`` committed 500 per transaction;
- relay: the relay alone publishing all N to the stream;
- project: one ``article-views`` consumer alone draining the stream;

then runs ``redis-benchmark`` pipelined XADD against the same server and
prints the relay's publish rate as a ratio to it (docs/benchmarks.md: at least 0.3), and
next to it what Redis takes of the relay's own XADDs (5 fields and a payload,
not one tiny field) sent all at once: the ceiling of any relay.
Writes its figures to its section of bench/README.md (``--no-readme``: don't).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import hiredis
from deliveries import timed_drain
from readme import record

from sluice.app.assembly import default_apps, open_resources
from sluice.builtin.articles.events import ArticleViewed
from sluice.cli.processes import runtime_settings
from sluice.config import Config, load_config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources, redis_client
from sluice.relay.publisher import head, pack
from sluice.relay.relay import Relay
from sluice.store import StoredEvent
from sluice.telemetry.logs import configure_logging

TARGET = 0.3


async def append(res: Resources, n: int) -> float:
    started = time.perf_counter()
    for i in range(0, n, 500):
        async with res.store.transaction() as tx:
            await tx.append(
                *(
                    ArticleViewed(article_id=f"a{j % 50}", viewer=str(j))
                    for j in range(i, min(n, i + 500))
                )
            )
    return time.perf_counter() - started


async def relay_alone(res: Resources, config: Config, n: int) -> float:
    stop = asyncio.Event()
    relay = Relay(res.store, res.redis, res.keys, batch=config.relay_batch)
    started = time.perf_counter()
    task = asyncio.create_task(relay.run(stop))
    while relay.published < n:  # noqa: ASYNC110 - polling a counter, as a client would
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    return elapsed


async def project_alone(res: Resources, config: Config, n: int) -> float:
    reader = redis_client(config, socket_timeout=10)
    consumer = Consumer(
        default_apps().groups["article-views"](res),
        reader,
        res.keys,
        "bench",
        runtime_settings(config),
    )
    elapsed = await timed_drain(consumer, n, reader)
    row = await res.store.fetchone("SELECT COALESCE(SUM(views), 0) FROM article_views")
    if not row or row[0] != n:
        raise SystemExit(f"projection counted {row and row[0]} views, expected {n}")
    return elapsed


def relays_xadds(server: RedisServer, events: list[StoredEvent]) -> float:
    """XADD/s of Redis taking the relay's own commands (``events`` packed as the relay
    packs them), all pipelined on one socket by a client doing nothing else: the
    ceiling of any relay on this server, next to ``redis-benchmark``'s tiny XADD."""
    head_ = head(b"bench:ceiling")
    data = b"".join(pack(head_, e) for e in events)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(hiredis.pack_command(("AUTH", server.password)))
        replies = hiredis.Reader()
        while (reply := replies.gets()) is False:
            replies.feed(sock.recv(4096))
        if isinstance(reply, hiredis.ReplyError):
            raise SystemExit(f"AUTH: {reply}")
        started = time.perf_counter()
        sock.sendall(data)
        left = len(events)
        while left:
            replies.feed(sock.recv(1 << 20))
            while replies.gets() is not False:
                left -= 1
        return len(events) / (time.perf_counter() - started)


def redis_benchmark(server: RedisServer, n: int, pipeline: int) -> float | None:
    """Pipelined XADD requests/s on ``server``; None without redis-benchmark."""
    if shutil.which("redis-benchmark") is None:
        return None
    out = subprocess.run(
        # The password on the command line is fine here: a throwaway server of the bench.
        [
            "redis-benchmark",
            "-h",
            "127.0.0.1",
            "-p",
            str(server.port),
            "-a",
            server.password,
            "-n",
            str(n),
            "-P",
            str(pipeline),
            "-q",
            "XADD",
            "bench:stream",
            "*",
            "f",
            "v",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.findall(r"([\d.]+) requests per second", out)
    if not found:
        raise SystemExit(f"could not read redis-benchmark's output: {out!r}")
    return float(found[-1])


async def main(args: argparse.Namespace) -> None:
    n = args.n
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        config = load_config(
            {},
            data_dir=Path(tmp) / "data",
            redis_url=server.url,
            log_level=args.log_level,
            log_format="json",
        )
        configure_logging(config)
        async with open_resources(config) as res:
            t_append = await append(res, n)
            t_relay = await relay_alone(res, config, n)
            t_project = await project_alone(res, config, n)
            events = await res.store.events_after(0, n)
        ceiling = relays_xadds(server, events)
        xadd = redis_benchmark(server, args.xadd_n, args.xadd_pipeline)
    relay_rate = n / t_relay
    lines = [
        f"| append, 500 events per transaction | {n / t_append:,.0f} |",
        f"| relay publish, alone | {relay_rate:,.0f} |",
        f"| article-views projection, one worker, alone | {n / t_project:,.0f} |",
        f"| end to end (the three one after another) | {n / (t_append + t_relay + t_project):,.0f}"
        " |",
    ]
    if xadd is None:
        verdict = "redis-benchmark is not on PATH: no XADD comparison"
    else:
        lines.append(f"| `redis-benchmark` XADD, -P {args.xadd_pipeline} | {xadd:,.0f} |")
        verdict = (
            f"relay publish / redis-benchmark XADD: **{relay_rate / xadd:.2f}**"
            f" (target >= {TARGET})"
        )
    lines.append(f"| Redis alone taking the relay's XADDs, all pipelined | {ceiling:,.0f} |")
    verdict += f"; relay / that ceiling: {relay_rate / ceiling:.2f}"
    table = "\n".join(
        [
            f"{n:,} events, log level {args.log_level}:",
            "",
            "| stage | events/s |",
            "|---|---|",
            *lines,
            "",
            verdict,
        ]
    )
    print(table)
    if not args.no_readme:
        record("pipeline", "pipeline.py: append -> relay -> article-views projection", table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=50_000)
    parser.add_argument("--log-level", default="warning", help="info: a line per handled event")
    parser.add_argument("--xadd-n", type=int, default=200_000)
    parser.add_argument("--xadd-pipeline", type=int, default=64)
    parser.add_argument("--no-readme", action="store_true")
    asyncio.run(main(parser.parse_args()))
