"""sluice end to end beside BullMQ, arq, taskiq-redis, Dramatiq and Celery on no-op jobs (docs/benchmarks.md).

Run by hand: ``.venv/bin/python bench/peers.py [--jobs 20000] [--workers 2]
[--only sluice,arq,...] [--store sqlite|postgres|sqlite,postgres]``. On first use
it creates the peers' own environments: ``bench/.venv-peers`` (the lock
``requirements/bench-peers.txt``, without sluice: arq pins redis-py below 6,
which sluice's range excludes) and ``bench/peers-node/node_modules`` (``npm
ci``). Both are git-ignored.

Each system gets a fresh private Redis (same binary, same settings), the same
number of worker processes, and the same shape of run:

1. its workers start; warm-up jobs go through until a batch is fully processed;
2. one producer process enqueues ``--jobs`` jobs with the library's bulkest public
   call (sluice: transactions of 500 events, as the API's group commit;
   BullMQ: ``addBulk`` of 1,000; arq and taskiq: 100 concurrent enqueues at a
   time; Dramatiq and Celery: one ``send``/``apply_async`` per job, they have
   no bulk call) while the workers already consume;
3. the clock runs from the producer's start to the last job finished, read
   from 16-byte count files the jobs write into (a memory write per job, see
   ``peers_py/counter.py``).

What is measured for sluice is the pipeline of docs/benchmarks.md, end to end: append
(SQLite, ``synchronous=FULL``; with ``--store postgres`` a private PostgreSQL
server with fsync on, a fresh database per system, see ``stores.py``; with
``--store sqlite,postgres`` both, in the same run, against the same peers)
-> relay (one ``sluice relay`` process, on top of the worker processes) ->
``sluice worker`` processes, each event committed to the ``article-views``
projection with its dedupe row (``sluice``), or handed to a handler group that
does nothing (``sluice-noop``), then acked.
The peers run a no-op job: enqueue + process, no durability beyond Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from readme import record
from stores import Stores, parse_stores

from sluice.embedded.redis_server import RedisServer

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS_VENV = BENCH / ".venv-peers"
PEERS_PY = BENCH / "peers_py"
NODE_DIR = BENCH / "peers-node"
SYSTEMS = ("sluice", "sluice-noop", "bullmq", "arq", "taskiq", "dramatiq", "celery")
PYTHON_PEERS = ("arq", "taskiq", "dramatiq", "celery")


@dataclass
class Result:
    system: str
    jobs: int
    enqueue_s: float
    total_s: float
    drain_s: float = 0.0
    error: str = ""
    store: str = ""  # sluice's systems: the store they ran on

    @property
    def label(self) -> str:
        return f"{self.system} ({self.store})" if self.store else self.system

    @property
    def rate(self) -> float:
        return self.jobs / self.total_s if self.total_s else 0.0

    @property
    def drain_rate(self) -> float:
        return self.jobs / self.drain_s if self.drain_s else 0.0


def ensure_environments() -> None:
    peer_python = PEERS_VENV / "bin" / "python"
    if not peer_python.exists():
        print("creating bench/.venv-peers (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        lock = ROOT / "requirements" / "bench-peers.txt"
        # --no-deps: the lock holds every package; pip's resolver would otherwise refuse
        # arq's redis[hiredis], which the lock pins as redis and hiredis apart.
        pip = [str(peer_python), "-m", "pip", "install", "-q", "--require-hashes", "--no-deps"]
        subprocess.run([*pip, "-r", str(lock)], check=True)
    if not (NODE_DIR / "node_modules").exists():
        print("npm ci in bench/peers-node (once)", flush=True)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True)


def worker_commands(system: str, workers: int, concurrency: int) -> list[list[str]]:
    peer = [str(PEERS_VENV / "bin" / "python")]
    ours = [sys.executable]
    if system in ("sluice", "sluice-noop"):
        group = "article-views" if system == "sluice" else "bench-noop"
        return [[*ours, "-m", "sluice", "relay"]] + [
            [*ours, "sluice_side.py", "worker", group, f"w{k}"] for k in range(workers)
        ]
    if system == "bullmq":
        return [["node", "bullmq.mjs", "worker", str(concurrency)] for _ in range(workers)]
    if system == "arq":
        return [[*peer, "-c", "import arq_jobs; arq_jobs.worker()"] for _ in range(workers)]
    if system == "taskiq":  # a supervisor and `workers` worker processes
        return [
            [
                *peer,
                "-m",
                "taskiq",
                "worker",
                "taskiq_jobs:broker",
                "--workers",
                str(workers),
                "--log-level",
                "WARNING",
            ]
        ]
    if system == "dramatiq":  # a supervisor and `workers` worker processes (8 threads each)
        return [[*peer, "-m", "dramatiq", "dramatiq_jobs", "--processes", str(workers)]]
    if system == "celery":  # solo pool: each worker process consumes and runs its tasks itself
        return [
            [
                *peer,
                "-m",
                "celery",
                "-A",
                "celery_jobs",
                "worker",
                "-P",
                "solo",
                "--loglevel",
                "WARNING",
                "-n",
                f"w{k}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
            for k in range(workers)
        ]
    raise ValueError(system)


def producer_command(system: str, jobs: int) -> list[str]:
    if system in ("sluice", "sluice-noop"):
        return [sys.executable, "sluice_side.py", "produce", str(jobs)]
    if system == "bullmq":
        return ["node", "bullmq.mjs", "produce", str(jobs)]
    return [str(PEERS_VENV / "bin" / "python"), "produce.py", system, str(jobs)]


def read_counts(directory: Path) -> tuple[int, float, float]:
    """Jobs finished, the wall time of the last one and of the first, over every process."""
    total, last, first = 0, 0.0, float("inf")
    for path in directory.iterdir():
        data = path.read_bytes()
        if len(data) == 24:
            n, at, began = struct.unpack("<Qdd", data)
            total, last, first = total + n, max(last, at), min(first, began) if n else first
    return total, last, first


def wait_count(directory: Path, target: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if read_counts(directory)[0] >= target:
            return True
        time.sleep(0.005)
    return False


@contextmanager
def running(
    commands: list[list[str]], cwd: Path, env: dict[str, str], logs: Path
) -> Iterator[None]:
    children = []
    for i, cmd in enumerate(commands):
        with (logs / f"worker{i}.log").open("ab") as log:
            children.append(
                subprocess.Popen(
                    cmd, cwd=cwd, env=env, stdout=log, stderr=log, start_new_session=True
                )
            )
    try:
        yield
    finally:
        for child in children:
            os.killpg(child.pid, signal.SIGTERM)
        for child in children:
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def produce(system: str, jobs: int, cwd: Path, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        producer_command(system, jobs), cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def warm_up(system: str, cwd: Path, env: dict[str, str], counts: Path) -> None:
    """Until a batch of 100 goes through whole (a group made at "$" misses earlier jobs)."""
    for _ in range(30):
        before = read_counts(counts)[0]
        produce(system, 100, cwd, env)
        if wait_count(counts, before + 100, 5.0):
            break
    else:
        raise RuntimeError("warm-up jobs never finished")
    settled = -1
    while settled != read_counts(counts)[0]:  # stragglers of earlier warm-up batches
        settled = read_counts(counts)[0]
        time.sleep(0.5)


def run_one(system: str, args: argparse.Namespace, stores: Stores, store: str = "") -> Result:
    with tempfile.TemporaryDirectory() as tmp_name, RedisServer(Path(tmp_name) / "redis") as server:
        tmp = Path(tmp_name)
        counts, logs = tmp / "counts", tmp / "logs"
        counts.mkdir()
        logs.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "BENCH_"))}
        env.update(
            BENCH_REDIS_URL=server.url,
            BENCH_COUNTS=str(counts),
            PYTHONPATH=str(PEERS_PY),
            SLUICE_REDIS_URL=server.url,
            SLUICE_DATA_DIR=str(tmp / "data"),
            SLUICE_LOG_LEVEL="warning",
            SLUICE_LOG_FORMAT="json",
        )
        if store:
            env.update(stores.env(store, tmp / "data"))
        try:
            return _run_one(system, args, env, counts, logs, store)
        finally:
            stores.drop(env)


def _run_one(
    system: str,
    args: argparse.Namespace,
    env: dict[str, str],
    counts: Path,
    logs: Path,
    store: str,
) -> Result:
    cwd = NODE_DIR if system == "bullmq" else PEERS_PY
    commands = worker_commands(system, args.workers, args.bullmq_concurrency)
    result = Result(system, args.jobs, 0, 0, store=store)
    try:
        with running(commands, cwd, env, logs):
            # End to end: the workers consume while the producer enqueues.
            warm_up(system, cwd, env, counts)
            base = read_counts(counts)[0]
            times = produce(system, args.jobs, cwd, env)
            if not wait_count(counts, base + args.jobs, args.timeout):
                done = read_counts(counts)[0] - base
                return Result(
                    system, args.jobs, 0, 0, f"only {done} of {args.jobs} finished", store=store
                )
            result.enqueue_s = times["end"] - times["start"]
            result.total_s = read_counts(counts)[1] - times["start"]
        # Drain: the jobs wait in Redis (sluice: in the store) while no worker runs.
        for stale in counts.iterdir():
            stale.unlink()
        produce(system, args.jobs, cwd, env)
        with running(commands, cwd, env, logs):
            if not wait_count(counts, args.jobs, args.timeout):
                done = read_counts(counts)[0]
                result.error = f"drain: only {done} of {args.jobs} finished"
                return result
            _, last, first = read_counts(counts)
            result.drain_s = last - first
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        tails = "".join(p.read_text()[-600:] for p in sorted(logs.iterdir()))
        result.error = f"{exc}: {tails}"
    return result


PYTHON_TARGET = (
    5.0  # docs/benchmarks.md: sluice end to end >= 5x the best of arq, taskiq, Dramatiq, Celery
)
BULLMQ_TARGET = 3.0  # and >= 3x BullMQ


def table(results: list[Result], args: argparse.Namespace) -> str:
    ok = [r for r in results if not r.error]
    ours = {r.store: r for r in ok if r.system == "sluice"}  # one per store
    header = ["system", "end to end jobs/s", "enqueue jobs/s", "drain jobs/s"]
    header += [f"sluice ({store}) / system" for store in ours]
    header += [f"sluice ({store}) / system (drain)" for store in ours]
    lines = [
        f"{args.jobs:,} jobs, {args.workers} worker processes each (sluice: + 1 relay process),"
        f" BullMQ concurrency {args.bullmq_concurrency} per worker:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.label} | failed: {r.error[:160]!r} |" + " |" * (len(header) - 2))
            continue
        cells = [r.label, f"{r.rate:,.0f}", f"{r.jobs / r.enqueue_s:,.0f}", f"{r.drain_rate:,.0f}"]
        cells += [f"{o.rate / r.rate:.2f}" for o in ours.values()]
        cells += [f"{o.drain_rate / r.drain_rate:.2f}" for o in ours.values()]
        lines.append("| " + " | ".join(cells) + " |")
    by = {r.system: r for r in ok if not r.store}
    python_peers = [by[p] for p in PYTHON_PEERS if p in by]
    lines.append("")
    for store, o in ours.items():
        if python_peers:
            best = max(python_peers, key=lambda r: r.rate)
            ratio = o.rate / best.rate
            lines.append(
                f"End to end, sluice ({store}) / best of arq, taskiq, Dramatiq, Celery"
                f" ({best.system}): **{ratio:.2f}** (target >= {PYTHON_TARGET:g}:"
                f" {'met' if ratio >= PYTHON_TARGET else 'missed'})"
            )
        if "bullmq" in by:
            ratio = o.rate / by["bullmq"].rate
            lines.append(
                f"End to end, sluice ({store}) / BullMQ: **{ratio:.2f}** (target >="
                f" {BULLMQ_TARGET:g}: {'met' if ratio >= BULLMQ_TARGET else 'missed'})"
            )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    ensure_environments()
    systems = args.only.split(",") if args.only else list(SYSTEMS)
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown system(s) {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    if shutil.which("node") is None and "bullmq" in systems:
        raise SystemExit("node is not on PATH (BullMQ needs Node.js)")
    store_names = parse_stores(args.store)
    runs = [
        (system, store)
        for system in systems
        for store in (store_names if system.startswith("sluice") else [""])
    ]
    results = []
    with Stores(store_names if any(s for _, s in runs) else []) as stores:
        for system, store in runs:
            result = run_one(system, args, stores, store)
            note = result.error or f"{result.rate:,.0f} jobs/s"
            print(f"{result.label}: {note}", flush=True)
            results.append(result)
        label = stores.label()
    text = table(results, args)
    print(text)
    if not args.no_readme:
        record(
            "peers",
            "peers.py: sluice end to end vs BullMQ, arq, taskiq, Dramatiq, Celery",
            text,
            extra=label,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2, help="2: the reference machine's cores")
    parser.add_argument("--bullmq-concurrency", type=int, default=10)
    parser.add_argument("--only", default="", help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--store",
        default="sqlite",
        help="sluice's store: sqlite, postgres, or sqlite,postgres (both, one run)",
    )
    parser.add_argument("--no-readme", action="store_true")
    main(parser.parse_args())
