"""CPU instructions per event of one ``article-views`` consumer draining its stream.

Run by hand: ``.venv/bin/python bench/consumer_cost.py [N] [--store sqlite,postgres]
[--log-level warning|info|debug] [--group article-views|link-stats|no-op]`` (default
20,000 events, SQLite, level warning: the figures of earlier runs; ``info`` is a
deployment's default, whose log lines count too). ``--group link-stats`` drains
``LinkVisited`` events (50 codes, every visitor new) through the ``link-stats``
projection instead; ``--group no-op``, the same ``ArticleViewed`` through a handler group
whose one handler (``@group.on``) does nothing: the runtime's own cost per event, and with
tracing on (``tracing_cost.py``), a CONSUMER span per event.
Needs ``valgrind`` (``apt-get install -y valgrind``).

The two worker processes are most of the CPU of ``bench/peers.py``'s pipeline, whose
wall-clock ratios move by a tenth from run to run on the shared 2-core machine. The
instructions a worker spends per event do not. Each store gets one child process under
callgrind on its own Redis and store (``bench/stores.py``): N ``ArticleViewed`` committed
and published by the relay, then the counters are zeroed, one consumer (the group's
production batch, its deliveries recorded as a worker records them) drains the stream,
and the counters are dumped once it has acked the last entry. Every thread of the
process counts (aiosqlite's included); the Redis and PostgreSQL servers do not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from callgrind import dumped_instructions
from stores import Stores, parse_stores

if TYPE_CHECKING:
    from sluice.events import Event
    from sluice.process.resources import Resources
    from sluice.streams.spec import GroupSpec


GROUPS = ("article-views", "link-stats", "no-op")


async def _callgrind(flag: str) -> None:
    """``callgrind_control flag`` on this process, the event loop running meanwhile (the
    request is served between the instructions this process runs)."""
    control = await asyncio.create_subprocess_exec(
        "callgrind_control", flag, str(os.getpid()), stdout=subprocess.DEVNULL
    )
    await control.wait()


async def drain(n: int, env: dict[str, str]) -> None:
    """The child, under callgrind: publish ``n`` events, then drain them, counted."""
    from deliveries import publish

    from sluice.app.assembly import open_resources
    from sluice.config import load_config
    from sluice.consumers.consumer import Consumer
    from sluice.process.resources import redis_client
    from sluice.records.deliveries import DeliveryLog
    from sluice.streams.spec import runtime_settings
    from sluice.telemetry import tracing
    from sluice.telemetry.logs import configure_logging

    config = load_config(env, log_level=env.get("BENCH_LOG_LEVEL", "warning"), log_format="json")
    configure_logging(config)
    tracing.configure("sluice")  # as ``sluice worker`` does: on when OTEL_* ask for it
    name = env.get("BENCH_GROUP", "article-views")
    async with open_resources(config) as res:
        # Traced: each event carries the traceparent of a request of its own.
        made = {"make": _visit} if name == "link-stats" else {}
        await publish(res, n, traced=tracing.ENABLED, **made)
        stop = asyncio.Event()
        reader = redis_client(config, socket_timeout=120)
        group, log = _group(name, res), DeliveryLog(res.store)
        consumer = Consumer(
            group, reader, res.keys, "bench", runtime_settings(config), deliveries=log
        )
        await _exported()  # the publication's spans: not the drain's
        await _callgrind("-z")
        task = asyncio.create_task(consumer.run(stop))
        while consumer.counters.handled < n:  # noqa: ASYNC110 - polling a counter
            await asyncio.sleep(0.002)
        await _exported()  # the drain's spans, exported inside the counted window
        await _callgrind("-d")
        stop.set()
        await task
        await reader.aclose()


def _visit(j: int) -> Event:
    from sluice.builtin.links.events import LinkVisited

    return LinkVisited(code=f"c{j % 50}", visitor=str(j))


def _group(name: str, res: Resources) -> GroupSpec:
    from sluice.app.assembly import default_apps

    if name != "no-op":
        return default_apps().groups[name](res)
    from sluice.app import App, HandlerContext
    from sluice.app.running import group_spec
    from sluice.builtin.articles.events import ArticleViewed

    group = App("bench").group("no-op")

    @group.on(ArticleViewed)
    async def seen(event: ArticleViewed, ctx: HandlerContext[None]) -> None:
        pass

    return group_spec(group, res)


async def _exported() -> None:
    """With tracing on, every span ended so far exported (the SDK's own flush)."""
    from sluice.telemetry import tracing

    if tracing.ENABLED:
        from opentelemetry import trace

        provider: Any = trace.get_tracer_provider()
        await asyncio.to_thread(provider.force_flush)


def measure(
    stores: Stores,
    store: str,
    n: int,
    log_level: str = "warning",
    group: str = "article-views",
    otel: dict[str, str] | None = None,
) -> float:
    """Instructions per event of one consumer draining ``n`` events on ``store``;
    ``otel``: the process's OTEL_* variables (tracing off without)."""
    from sluice.embedded.redis_server import RedisServer

    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
        env.update(otel or {})
        env.update(
            stores.env(store, Path(tmp) / "data"),
            SLUICE_REDIS_URL=server.url,
            BENCH_LOG_LEVEL=log_level,
            BENCH_GROUP=group,
        )
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--dump-instr=no",
            sys.executable,
            __file__,
            "--child",
            str(n),
        ]
        subprocess.run(
            command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return dumped_instructions(Path(tmp)) / n  # the drain alone


def main(args: argparse.Namespace) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not on PATH: apt-get install -y valgrind")
    with Stores(args.store) as stores:
        for store in args.store:
            per_event = measure(stores, store, args.n, args.log_level, args.group)
            print(
                f"{store}: {per_event:,.0f} instructions per event ({args.n:,} events, one "
                f"{args.group} consumer, log level {args.log_level})",
                flush=True,
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(drain(int(sys.argv[2]), dict(os.environ)))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=20_000)
    parser.add_argument("--store", type=parse_stores, default=["sqlite"])
    parser.add_argument("--log-level", choices=("warning", "info", "debug"), default="warning")
    parser.add_argument("--group", choices=GROUPS, default="article-views")
    main(parser.parse_args())
