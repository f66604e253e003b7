"""What recording every delivery costs the busiest group: the article-views projection
draining a stream with and without its ``DeliveryLog``, in turns.

Run by hand: ``.venv/bin/python bench/deliveries.py [N] [--turns 3]
[--store sqlite,postgres] [--no-readme]``.

docs/guides/operate.md records every attempt of every group durably, and the pipeline targets of
section 8 must still hold. Each measurement starts from a fresh store and an empty
Redis (``bench/stores.py``: SQLite with ``synchronous=FULL``, a private PostgreSQL
with fsync on): N ``ArticleViewed`` committed and published by the relay, then one
``article-views`` consumer (its production batch, ``SLUICE_PROJECTION_BATCH``) drains
the stream, timed from its start to its last ack; with records, each of its batches
writes its attempts before the ack, as a worker does. The two variants alternate, so the
machine's drift falls on both; the ratio is with / without.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import msgspec
from readme import record
from redis.asyncio import Redis
from stores import Stores, parse_stores, postgres_version

from sluice.app.assembly import default_apps, open_resources
from sluice.builtin.articles.events import ArticleViewed
from sluice.cli.processes import runtime_settings
from sluice.config import Config, load_config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.events import Event
from sluice.process.resources import Resources, redis_client
from sluice.records.deliveries import DeliveryLog
from sluice.relay.relay import Relay
from sluice.telemetry.logs import configure_logging


def _view(j: int) -> Event:
    return ArticleViewed(article_id=f"a{j % 50}", viewer=str(j))


async def publish(
    res: Resources, n: int, make: Callable[[int], Event] = _view, *, traced: bool = False
) -> None:
    """Commit ``n`` events (the ``j``-th ``make(j)``: by default a view of one of 50
    articles), then publish them with the relay. ``traced``: each event stored under a
    span of its own, as if each came from a request of its own (a W3C traceparent with
    a random trace and span id, sampled)."""
    for i in range(0, n, 500):
        events = [make(j) for j in range(i, min(n, i + 500))]
        parents = (
            [f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01" for _ in events]
            if traced
            else None
        )
        async with res.store.transaction() as tx:
            await tx.append(*events, traceparents=parents)
    stop = asyncio.Event()
    relay = Relay(res.store, res.redis, res.keys, batch=2_000)
    task = asyncio.create_task(relay.run(stop))
    while relay.published < n:  # noqa: ASYNC110 - polling a counter
        await asyncio.sleep(0.01)
    stop.set()
    await task


async def timed_drain(consumer: Consumer, n: int, reader: Redis) -> float:
    """Run ``consumer`` until it handled ``n`` entries, then stop it and close its
    ``reader``: the seconds from its start to its ``n``-th."""
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(consumer.run(stop))
    while consumer.counters.handled < n:  # noqa: ASYNC110 - polling a counter
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    await reader.aclose()
    return elapsed


async def drain(res: Resources, config: Config, n: int, recorded: bool) -> float:
    reader = redis_client(config, socket_timeout=10)
    log = DeliveryLog(res.store) if recorded else None
    consumer = Consumer(
        default_apps().groups["article-views"](res),
        reader,
        res.keys,
        "bench",
        runtime_settings(config),
        deliveries=log,
    )
    elapsed = await timed_drain(consumer, n, reader)
    rows = await res.store.fetchone("SELECT COUNT(*) FROM deliveries")
    batches = await res.store.fetchall("SELECT entries FROM delivery_batches")
    found = (rows[0] if rows else 0) + sum(
        len(msgspec.msgpack.decode(zlib.decompress(b))) for (b,) in batches
    )
    expected = n if recorded else 0
    if found != expected:
        raise SystemExit(f"{found} delivery records, expected {expected}")
    return elapsed


async def one(stores: Stores, store: str, n: int, recorded: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        env = stores.env(store, Path(tmp) / "data")
        config = load_config(env, redis_url=server.url, log_level="warning", log_format="json")
        async with open_resources(config) as res:
            await publish(res, n)
            return await drain(res, config, n, recorded)


async def main(args: argparse.Namespace) -> None:
    configure_logging(load_config({}, log_level="warning", log_format="json"))
    lines = [
        "| store | without records, events/s | with records, events/s | with / without |",
        "|---|---|---|---|",
    ]
    with Stores(args.store) as stores:
        for store in args.store:
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.turns):
                for recorded in (False, True):
                    times[recorded].append(await one(stores, store, args.n, recorded))
            without = args.n / statistics.median(times[False])
            with_ = args.n / statistics.median(times[True])
            lines.append(f"| {store} | {without:,.0f} | {with_:,.0f} | **{with_ / without:.2f}** |")
            print(lines[-1], flush=True)
    table = "\n".join(
        [
            f"{args.n:,} events, one article-views consumer"
            f" (batch {load_config({}).projection_batch:,}), medians of {args.turns}"
            " turns, each on a fresh store:",
            "",
            *lines,
        ]
    )
    print(table)
    if not args.no_readme:
        extra = f"PostgreSQL {postgres_version()}" if "postgres" in args.store else ""
        record(
            "deliveries", "deliveries.py: what recording every delivery costs", table, extra=extra
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=50_000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--store", type=parse_stores, default=["sqlite", "postgres"])
    parser.add_argument("--no-readme", action="store_true")
    asyncio.run(main(parser.parse_args()))
