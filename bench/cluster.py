"""End to end on a Redis Cluster against a single Redis, in one run (issue 15).

Run by hand: ``.venv/bin/python bench/cluster.py [--events 50000] [--rounds 2]
[--workers 1] [--articles 1000] [--store sqlite] [--no-readme]``.

Starts, side by side, one Redis (``sluice.embedded.redis_server.RedisServer``) and a Redis
Cluster of 3 primaries and 3 replicas (``sluice.embedded.redis_cluster_server.RedisCluster``),
both with the AOF on, under a temporary directory. Then, for each topology (one Redis
with 1 partition, one Redis with 16, the cluster with 16), interleaved round by round
so that the machine's noise shows between runs of the same topology:

- a fresh store (SQLite in a fresh data dir, or a fresh database on a private
  PostgreSQL, ``bench/stores.py``) and an empty Redis;
- the real processes, ``python -m sluice relay`` and ``--workers`` times
  ``python -m sluice worker article-views``, started and waited for (the relay holds
  its lock, every worker reads every partition);
- N ``ArticleViewed`` over ``--articles`` article ids (so that they spread over the
  partitions) committed in one transaction, and the relay woken with a ``PUBLISH``,
  as the API does; the clock starts at the commit;
- the store polled until the relay's stored position reaches the last ``seq`` (its
  publish rate: the position is written after Redis took a batch, so this is an upper
  bound on the publish time) and ``SUM(views)`` of ``article_views`` reaches N (end to
  end). The count must then be exactly N, with no dead letter and the relay's position
  at the head, or the script stops.

The CPU time the relay, the workers and the Redis servers used while draining is
read from ``/proc``. Writes its figures to its section of bench/README.md
(``--no-readme``: don't).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as aioredis
from children import spawn, stop
from readme import record
from redis import Redis as SyncRedis
from redis.crc import key_slot
from stores import Stores, parse_stores

from sluice.app.assembly import open_store
from sluice.builtin.articles.events import ArticleViewed
from sluice.config import Config, load_config
from sluice.embedded.redis_cluster_server import RedisCluster
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import keys_for, redis_client
from sluice.store import Store
from sluice.streams.engine_keys import Keys
from sluice.telemetry.logs import configure_logging

GROUP = "article-views"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Topology:
    label: str
    cluster: bool
    partitions: int

    @property
    def primaries(self) -> int:
        return 3 if self.cluster else 1


TOPOLOGIES = (
    Topology("single Redis, 1 partition", cluster=False, partitions=1),
    Topology("single Redis, 16 partitions", cluster=False, partitions=16),
    Topology("cluster 3+3, 16 partitions", cluster=True, partitions=16),
)


@dataclass
class Trial:
    topology: Topology
    store: str
    workers: int
    run: int
    events: int = 0
    relay_s: float = 0.0  # commit to the relay's position at the head
    drain_s: float = 0.0  # commit to SUM(views) == N
    first_view_s: float = 0.0  # commit to the first view counted
    cpu: dict[str, float] = field(default_factory=dict)  # seconds while draining
    complaints: list[str] = field(default_factory=list)  # log lines at warning or above

    @property
    def rate(self) -> float:
        return self.events / self.drain_s

    @property
    def relay_rate(self) -> float:
        return self.events / self.relay_s


@dataclass
class Redises:
    """The two Redis deployments of the run, and the processes whose CPU counts."""

    single: RedisServer
    cluster: RedisCluster

    def overrides(self, topology: Topology) -> dict[str, object]:
        if topology.cluster:
            return {
                "redis_cluster_nodes": self.cluster.seeds,
                "redis_password": self.cluster.password,
            }
        return {"redis_url": self.single.url}

    def pids(self, topology: Topology) -> dict[str, list[int]]:
        if not topology.cluster:
            assert self.single.process is not None
            return {"redis": [self.single.process.pid]}
        # RedisCluster makes its first `primaries` nodes the primaries; no failover here.
        nodes = [n.process.pid for n in self.cluster.nodes if n.process is not None]
        return {
            "redis": nodes[: self.cluster.primaries],
            "replicas": nodes[self.cluster.primaries :],
        }

    def blocked(self, topology: Topology) -> int:
        """Connections blocked in XREADGROUP on the primaries of ``topology``."""
        servers = (
            self.cluster.nodes[: self.cluster.primaries] if topology.cluster else [self.single]
        )
        count = 0
        for server in servers:
            with SyncRedis(port=server.port, password=server.password) as client:
                count += sum(
                    c["cmd"] == "xreadgroup" and "b" in c["flags"] for c in client.client_list()
                )
        return count

    def flush(self, topology: Topology) -> None:
        if topology.cluster:
            self.cluster.flush()
        else:
            with SyncRedis.from_url(self.single.url) as client:
                client.flushall()


# --- processes ------------------------------------------------------------------------------


def child_env(config: Config) -> dict[str, str]:
    """The SLUICE_* settings of ``config`` for a ``python -m sluice`` child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(
        SLUICE_DATA_DIR=str(config.data_dir),
        SLUICE_LOG_FORMAT="json",
        SLUICE_LOG_LEVEL="warning",
        SLUICE_REDIS_URL=config.redis_url or "",
        SLUICE_STREAM_PARTITIONS=str(config.partitions),
    )
    if config.postgres:
        env["SLUICE_DATABASE_URL"] = config.database_url
    if config.cluster:
        env["SLUICE_REDIS_CLUSTER_NODES"] = config.redis_cluster_nodes
        env["SLUICE_REDIS_PASSWORD"] = config.redis_password or ""
    return env


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def complaints(logs: Path) -> list[str]:
    """The children's log lines at warning or above (they log JSON at warning)."""
    found = []
    for path in sorted(logs.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                level = json.loads(line).get("level", "")
            except (ValueError, AttributeError):
                level = "unparsed"  # a traceback or a print: worth reading too
            if level != "info":
                found.append(f"{path.stem}: {line[:300]}")
    return found


def tail(logs: Path) -> str:
    return "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(logs.glob("*.log"))
    )


# --- one trial ------------------------------------------------------------------------------


async def wait_ready(
    redis: aioredis.Redis,
    keys: Keys,
    readers: int,
    redises: Redises,
    topology: Topology,
    children: list[subprocess.Popen[bytes]],
    logs: Path,
) -> None:
    """Until the relay holds its lock and every worker blocks reading every partition.

    (Redis 7.0 lists a consumer in XINFO CONSUMERS only once it was given an entry,
    so the blocked XREADGROUP connections are counted instead.)"""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            raise SystemExit(f"a child exited before the run:\n{tail(logs)}")
        if await redis.exists(keys.relay_lock()) and redises.blocked(topology) >= readers:
            return
        await asyncio.sleep(0.1)
    raise SystemExit(f"relay and workers not ready after 60 s:\n{tail(logs)}")


async def drain(store: Store, trial: Trial, head: int, started: float, limit_s: float) -> None:
    """Poll the relay's position and the views counted until both reached the end."""
    deadline = started + limit_s
    while not (trial.drain_s and trial.relay_s):
        now = time.perf_counter()
        if now > deadline:
            raise SystemExit(f"not drained after {limit_s:.0f} s: {trial}")
        position = await store.position("relay")
        if position >= head and not trial.relay_s:
            trial.relay_s = now - started
        row = await store.fetchone("SELECT COALESCE(SUM(views), 0) FROM article_views")
        if row and row[0] and not trial.first_view_s:
            trial.first_view_s = now - started
        if row and int(row[0]) >= trial.events and not trial.drain_s:
            trial.drain_s = now - started
        # Finely until the first view (how soon the pipeline answers), then every 50 ms.
        await asyncio.sleep(0.01 if not trial.first_view_s else 0.05)


async def verify(store: Store, redis: aioredis.Redis, keys: Keys, trial: Trial, head: int) -> None:
    """Exactly N views, the relay at the head, no dead letter: else stop loudly."""
    await asyncio.sleep(0.5)  # a late duplicate would show up as more than N
    row = await store.fetchone("SELECT COALESCE(SUM(views), 0) FROM article_views")
    views = int(row[0]) if row else -1
    position = await store.position("relay")
    dead = sum([await redis.xlen(keys.dead(GROUP, p)) for p in keys.numbers])
    delayed = sum([await redis.zcard(keys.delayed(GROUP, p)) for p in keys.numbers])
    if (views, position, dead, delayed) != (trial.events, head, 0, 0):
        raise SystemExit(
            f"{trial.topology.label}, run {trial.run}: {views} views counted (expected"
            f" {trial.events}), relay position {position} (head {head}), {dead} dead"
            f" letters, {delayed} delayed retries"
        )


async def run_trial(
    trial: Trial, config: Config, redises: Redises, logs: Path, args: argparse.Namespace
) -> None:
    keys = keys_for(config)
    store = await open_store(config)  # migrates the fresh store before the children start
    redis = redis_client(config)
    env = child_env(config)
    names = [f"bench-w{i}" for i in range(trial.workers)]
    children = [spawn(["relay"], env, logs / "relay.log")] + [
        spawn(["worker", GROUP, "--consumer", name], env, logs / f"{name}.log") for name in names
    ]
    try:
        readers = trial.workers * trial.topology.partitions
        await wait_ready(redis, keys, readers, redises, trial.topology, children, logs)
        events = [
            ArticleViewed(article_id=f"a{j % args.articles}", viewer=str(j))
            for j in range(args.events)
        ]
        pids = {
            "relay": [children[0].pid],
            "workers": [c.pid for c in children[1:]],
            **redises.pids(trial.topology),
        }
        before = {name: cpu_seconds(p) for name, p in pids.items()}
        async with store.transaction() as tx:
            await tx.append(*events)
        started = time.perf_counter()
        await redis.publish(keys.outbox_channel(), b"1")
        trial.events = len(events)
        head = int((await store.fetchone("SELECT MAX(seq) FROM events") or [0])[0])
        await drain(store, trial, head, started, args.timeout)
        trial.cpu = {name: cpu_seconds(p) - before[name] for name, p in pids.items()}
        await verify(store, redis, keys, trial, head)
    finally:
        codes = [stop(child) for child in children]
        await redis.aclose()
        await store.close()
    trial.complaints = complaints(logs)
    if any(codes):
        trial.complaints.append(f"exit codes relay, workers: {codes}")


# --- the cluster's spread -------------------------------------------------------------------


async def spread(redises: Redises, data_dir: Path, args: argparse.Namespace) -> str:
    """Which primary holds each partition of the cluster, and the events of this run in it."""
    topology = next(t for t in TOPOLOGIES if t.cluster)
    config = load_config(
        {}, data_dir=data_dir, stream_partitions=topology.partitions, **redises.overrides(topology)
    )
    keys = keys_for(config)
    client = redis_client(config)
    try:
        await client.initialize()  # the slot map
        find = client.get_node_from_key  # type: ignore[attr-defined]
        nodes = {p: find(keys.space(p)) for p in keys.numbers}
    finally:
        await client.aclose()
    ports = [n.port for n in redises.cluster.nodes[: redises.cluster.primaries]]
    label = {
        port: f"primary {i + 1} (slots {_slots(i, len(ports))})" for i, port in enumerate(ports)
    }
    per_article = Counter(f"a{j % args.articles}" for j in range(args.events))
    events = Counter({p: 0 for p in keys.numbers})
    for article, count in per_article.items():
        events[keys.partition_of(article)] += count
    rows = [
        "| partition | key prefix | slot | primary | events of a run |",
        "|---|---|---|---|---|",
    ]
    for p in keys.numbers:
        rows.append(
            f"| {p} | `{keys.space(p)}` | {key_slot(keys.space(p).encode())} |"
            f" {label.get(nodes[p].port, nodes[p].name)} | {events[p]:,} |"
        )
    totals = ["", "| primary | partitions | events of a run | share |", "|---|---|---|---|"]
    for port in ports:
        mine = [p for p in keys.numbers if nodes[p].port == port]
        count = sum(events[p] for p in mine)
        totals.append(f"| {label[port]} | {len(mine)} | {count:,} | {count / args.events:.0%} |")
    return "\n".join(rows + totals)


def _slots(i: int, primaries: int) -> str:
    per = 16384 // primaries
    last = 16384 if i == primaries - 1 else (i + 1) * per
    return f"{i * per}-{last - 1}"


# --- the run --------------------------------------------------------------------------------


def table(trials: list[Trial], args: argparse.Namespace, load: tuple[float, float]) -> str:
    stores = sorted({t.store for t in trials})
    lines = [
        f"{args.events:,} `ArticleViewed` over {args.articles:,} articles, committed in one"
        f" transaction, then drained by the real `sluice relay` and `sluice worker"
        f" article-views` processes; store {', '.join(stores)}; runs in the order they ran."
        f" 2 cores shared with other work: load average {load[0]:.1f} before the run,"
        f" {load[1]:.1f} after.",
        "",
        "| topology | run | workers | **end to end, events/s** | relay publish, events/s |"
        " per primary, events/s | first view counted after | CPU s while draining: relay /"
        " workers / Redis primaries / replicas |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        cpu = " / ".join(
            f"{t.cpu.get(k, 0.0):.1f}" if k in t.cpu else "-"
            for k in ("relay", "workers", "redis", "replicas")
        )
        lines.append(
            f"| {t.topology.label}{'' if len(stores) == 1 else f', {t.store}'} | {t.run} |"
            f" {t.workers} | **{t.rate:,.0f}** ({t.drain_s:.1f} s) | {t.relay_rate:,.0f}"
            f" ({t.relay_s:.1f} s) | {t.rate / t.topology.primaries:,.0f} |"
            f" {t.first_view_s * 1000:.0f} ms | {cpu} |"
        )
    noisy = [
        f"- {t.topology.label}, run {t.run}, {t.workers} worker(s): {line}"
        for t in trials
        for line in t.complaints
    ]
    lines += [
        "",
        "Log lines at warning or above, and non-zero exits, of the relay and workers:"
        f" {len(noisy)}",
        *noisy[:20],
    ]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    stores = parse_stores(args.store)
    load_before = os.getloadavg()[0]
    trials: list[Trial] = []
    with (
        tempfile.TemporaryDirectory(prefix="sluice-bench-cluster-") as tmp_name,
        RedisServer(Path(tmp_name) / "redis") as single,
        RedisCluster(Path(tmp_name) / "cluster") as cluster,
        Stores(stores) as pg,
    ):
        tmp = Path(tmp_name)
        redises = Redises(single, cluster)
        configure_logging(load_config({}, data_dir=tmp, log_level="warning", log_format="json"))
        spread_table = await spread(redises, tmp / "spread", args)
        print(spread_table, flush=True)
        k = 0
        for run in range(1, args.rounds + 1):
            for store in stores:
                for workers in args.worker_counts:
                    for topology in TOPOLOGIES:
                        k += 1
                        trial = Trial(topology, store, workers, run)
                        await one(trial, redises, pg, tmp / f"trial{k}", args)
                        trials.append(trial)
        label = pg.label()
    text = table(trials, args, (load_before, os.getloadavg()[0]))
    text += "\n\nThe cluster's 16 partitions over its 3 primaries:\n\n" + spread_table
    print(text)
    if not args.no_readme:
        record(
            "cluster",
            "cluster.py: end to end on a Redis Cluster against a single Redis",
            text,
            keep=3,
            extra=label,
        )


async def one(
    trial: Trial, redises: Redises, pg: Stores, where: Path, args: argparse.Namespace
) -> None:
    logs = where / "logs"
    logs.mkdir(parents=True)
    env = pg.env(trial.store, where / "data")
    config = load_config(
        {},
        data_dir=where / "data",
        database_url=env.get("SLUICE_DATABASE_URL", ""),
        stream_partitions=trial.topology.partitions,
        log_level="warning",
        log_format="json",
        **redises.overrides(trial.topology),
    )
    try:
        await run_trial(trial, config, redises, logs, args)
    finally:
        redises.flush(trial.topology)
        pg.drop(env)
        shutil.rmtree(where / "data", ignore_errors=True)
    print(
        f"{trial.topology.label}, run {trial.run}, {trial.workers} worker(s): {trial.rate:,.0f}"
        f" events/s end to end, relay {trial.relay_rate:,.0f}/s, cpu {trial.cpu},"
        f" {len(trial.complaints)} log complaints",
        flush=True,
    )
    for line in trial.complaints[:5]:
        print("   ", line, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--articles", type=int, default=1_000, help="distinct article ids")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each topology, interleaved")
    parser.add_argument("--workers", default="1", help="worker processes, comma-separated: 1,2")
    parser.add_argument("--store", default="sqlite", help="sqlite, postgres or both")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per drain")
    parser.add_argument("--no-readme", action="store_true")
    options = parser.parse_args()
    options.worker_counts = [int(n) for n in options.workers.split(",")]
    asyncio.run(main(options))
