"""What flow control costs a group whose limits never bind: the article-views group
draining a stream as declared, and with ``Flow(key="article_id", concurrency=100_000)``,
in turns.

Run by hand: ``.venv/bin/python bench/flow.py [N] [--turns 3] [--no-readme]``.

A group without ``flow=`` pays one ``is None`` check per batch (bench/consumer_cost.py
measures that in instructions); a group with it pays two scripts per batch (acquire,
release with its turn) and the work of asking each event its key. Each measurement
starts from a fresh SQLite store and an empty Redis: N ``ArticleViewed`` (50 articles)
committed and published by the relay, then one consumer drains the stream, timed from
its start to its last ack. The two variants alternate; the ratio is with / without.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
from pathlib import Path

from deliveries import publish, timed_drain
from readme import record
from stores import Stores

from sluice.app.assembly import default_apps, open_resources
from sluice.cli.processes import runtime_settings
from sluice.config import load_config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.flow.spec import Flow
from sluice.process.resources import redis_client
from sluice.telemetry.logs import configure_logging

GENEROUS = Flow(key="article_id", concurrency=100_000)


async def one(stores: Stores, n: int, flow: bool) -> float:
    """Seconds one consumer takes to drain ``n`` events, with or without ``GENEROUS``."""
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        env = stores.env("sqlite", Path(tmp) / "data")
        config = load_config(env, redis_url=server.url, log_level="warning", log_format="json")
        async with open_resources(config) as res:
            await publish(res, n)
            spec = default_apps().groups["article-views"](res)
            if flow:
                spec = dataclasses.replace(spec, flow=GENEROUS)
            reader = redis_client(config, socket_timeout=10)
            consumer = Consumer(spec, reader, res.keys, "bench", runtime_settings(config))
            return await timed_drain(consumer, n, reader)


async def main(args: argparse.Namespace) -> None:
    configure_logging(load_config({}, log_level="warning", log_format="json"))
    times: dict[bool, list[float]] = {False: [], True: []}
    with Stores(["sqlite"]) as stores:
        for _ in range(args.turns):
            for flow in (False, True):
                times[flow].append(await one(stores, args.n, flow))
    without = args.n / statistics.median(times[False])
    with_ = args.n / statistics.median(times[True])
    table = "\n".join(
        [
            f"{args.n:,} events, one article-views consumer on SQLite, medians of"
            f" {args.turns} turns, each on a fresh store:",
            "",
            "| without flow, events/s | with a flow that never binds, events/s | with / without |",
            "|---|---|---|",
            f"| {without:,.0f} | {with_:,.0f} | **{with_ / without:.2f}** |",
        ]
    )
    print(table)
    if not args.no_readme:
        record("flow", "flow.py: what flow control costs when its limits never bind", table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=20_000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--no-readme", action="store_true")
    asyncio.run(main(parser.parse_args()))
