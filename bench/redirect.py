"""Redirect throughput with visit recording, against a bare aiohttp 302 handler (docs/benchmarks.md).

Run by hand: ``.venv/bin/python bench/redirect.py [--duration 15] [--connections 64]
[--threads 2] [--log-level info] [--processes 1,2] [--redirect-log errors|all|errors,all]
[--store sqlite|postgres|sqlite,postgres] [--rules] [--pipeline during,after]``.
``--rules`` adds each variant
again on a link with three redirect rules, none of which matches (docs/guides/links.md: rules add
only in-process work). Needs ``wrk`` on PATH (``apt-get install
wrk``).

With ``--store sqlite,postgres`` the whole measurement below runs once per store
in the same run (PostgreSQL: a private server with fsync on, see ``stores.py``),
each store with its own bare run right before it, and the figures go into
bench/README.md (``--no-readme``: don't).

Starts its own Redis on a free loopback port, a store in a temporary directory,
one ``sluice relay`` and one ``sluice worker link-stats`` process, and a bare
aiohttp app that only answers 302 (another process, another port). wrk hits the
bare app, then ``GET /{code}`` of each sluice variant with the same settings, one
after the other in the same run: ``sluice api --processes N`` for each N of
``--processes``, for each ``SLUICE_REDIRECT_LOG`` of ``--redirect-log``. After its
wrk run each variant's redirects are read from its ``/metrics`` (wrk does not count
responses still in flight when its time is up, so the server's own count is the
truth) and it is stopped (SIGTERM: its writers commit what they still buffer). Then
the pipeline drains, and the link's ``total`` is compared with the redirects all
variants served.

``--history N`` first commits N visits to 1,000 other links (transactions of 500, each
visit with a trace id from the generator of the sluice under test, as its API would
have made them) and waits until the relay has published them and ``link-stats`` has
counted them: the redirects then run against a history of that size, as in a
deployment (the hot history keeps 7 days), not against an empty table.

``--pipeline after`` adds each variant again with the relay and ``link-stats`` stopped
while its wrk runs (SIGTERM before the API starts, started again once it stopped): the
visits are committed by the API all the same, and published and counted afterwards.
On two cores that wrk already shares, those two processes and Redis take CPU from the
API process during the run (the bare handler has a core to itself); this row shows the
API alone, as it runs on a host where they have cores of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from readme import record
from stores import Stores, parse_stores
from visits import Visits, random_trace_id

from sluice.app.assembly import open_store
from sluice.builtin.links.events import LinkCreated
from sluice.config import load_config
from sluice.embedded.redis_server import RedisServer, free_port
from sluice.events import utcnow
from sluice.store.users import db_time

CODE = "bench1"
TARGET = "https://example.org/landing"
# --rules: a link whose three rules (docs/guides/links.md) all get evaluated and none matches wrk's
# requests (no User-Agent, no Accept-Language, a loopback address), the worst case.
RULED = "bench2"
RULES = (
    '[{"when": {"device": "mobile"}, "url": "https://example.org/m"},'
    ' {"when": {"language": "fr"}, "url": "https://example.org/fr"},'
    ' {"when": {"country": "DE"}, "url": "https://example.org/de"}]'
)


def bare_app(port: int) -> None:
    """The baseline: one aiohttp handler answering the same 302, nothing else."""
    from aiohttp import web

    async def redirect(request: web.Request) -> web.Response:
        headers = {"Location": TARGET, "Cache-Control": "private, no-store"}
        return web.Response(status=302, headers=headers)

    app = web.Application()
    app.router.add_get("/{code}", redirect)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


@dataclass
class WrkResult:
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    non_3xx: int
    text: str


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def run_wrk(url: str, args: argparse.Namespace) -> WrkResult:
    command = [
        "wrk",
        f"-t{args.threads}",
        f"-c{args.connections}",
        f"-d{args.duration}s",
        "--latency",
        url,
    ]
    text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", text, re.MULTILINE))  # "1.89s "
    non_3xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return WrkResult(
        requests=int(re.search(r"(\d+) requests in", text)[1]),  # type: ignore[index]
        rps=float(re.search(r"Requests/sec:\s+([\d.]+)", text)[1]),  # type: ignore[index]
        p50_ms=_ms(latency["50"]),
        p99_ms=_ms(latency["99"]),
        non_3xx=int(non_3xx[1]) if non_3xx else 0,
        text=text,
    )


async def create_link(env: dict[str, str]) -> None:
    config = load_config(env)
    store = await open_store(config)
    now = db_time(utcnow())
    try:
        async with store.transaction() as tx:
            await tx.execute(
                "INSERT INTO users (id, email, email_key, name, password_hash, created_at)"
                " VALUES ('bench', 'bench@example.org', 'bench@example.org', NULL, 'x', ?)",
                (now,),
            )
            for code, rules in ((CODE, None), (RULED, RULES)):
                await tx.execute(
                    "INSERT INTO links (code, owner_id, url, expires_at, disabled, created_at,"
                    " updated_at, rules) VALUES (?, 'bench', ?, NULL, 0, ?, ?, ?)",
                    (code, TARGET, now, now, rules),
                )
                await tx.append(LinkCreated(code=code, owner_id="bench", url=TARGET))
    finally:
        await store.close()


def _trace_ids() -> Callable[[], str]:
    """The trace-id generator of the sluice under test. A checkout from before
    ``sluice.events.new_trace_id`` (on ``PYTHONPATH``, for a before/after) drew 128
    random bits."""
    import sluice.events

    made: Callable[[], str] = getattr(sluice.events, "new_trace_id", random_trace_id)
    return made


async def prefill(env: dict[str, str], visits: int) -> None:
    """``--history``: ``visits`` committed visits to 1,000 other links."""
    store = await open_store(load_config(env))
    made = Visits("old", _trace_ids())
    try:
        for done in range(0, visits, 500):
            async with store.transaction() as tx:
                await tx.append(*made.batch(min(500, visits - done)))
    finally:
        await store.close()


async def counted_visits(env: dict[str, str]) -> int:
    """Visits ``link-stats`` has counted, every link."""
    store = await open_store(load_config(env))
    try:
        row = await store.fetchone("SELECT SUM(total) FROM link_stats")
    finally:
        await store.close()
    return int(row[0] or 0) if row else 0


async def link_total(env: dict[str, str]) -> tuple[int, int]:
    """(link-stats total of the links, LinkVisited events committed)."""
    store = await open_store(load_config(env))
    try:
        row = await store.fetchone(
            "SELECT SUM(total) FROM link_stats WHERE code IN (?, ?)", (CODE, RULED)
        )
        events = await store.fetchone("SELECT COUNT(*) FROM events WHERE type = 'LinkVisited'")
    finally:
        await store.close()
    return (int(row[0] or 0) if row else 0), (int(events[0]) if events else 0)


def wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


ADMIN_TOKEN = "bench-redirect-admin-token-0123456789abcdef"


def served_redirects(port: int) -> int:
    """GET /{code} answered 302, from one scrape of the API's ``/metrics`` (every
    process of ``--processes`` counted; each publishes its tally every second)."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    wanted = {"method": "GET", "route": "/{code}", "status": "302"}
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "sluice_http_requests_total" and sample.labels == wanted
        )
    )


def sluice(
    args: list[str], env: dict[str, str], log: Path | None = None
) -> subprocess.Popen[bytes]:
    stderr = log.open("wb") if log else None
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "sluice", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr or subprocess.DEVNULL,
        )
    finally:
        if stderr is not None:
            stderr.close()  # the child holds its own copy


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown cpu",
    )
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    version = re.search(r"v=(\S+)", redis)
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}, "
        f"Redis {version[1] if version else '?'}"
    )


@dataclass
class Variant:
    name: str  # "1 process", "2 processes", with "(log all)" when every redirect is logged
    result: WrkResult
    served: int


@dataclass
class StoreRun:
    store: str
    bare: WrkResult
    variants: list[Variant]
    total: int
    committed: int

    @property
    def served(self) -> int:
        return sum(v.served for v in self.variants)


def report(run: StoreRun) -> None:
    print(f"machine: {machine()}")
    print(
        f"bare aiohttp 302: {run.bare.rps:,.0f} req/s, p50 {run.bare.p50_ms:.2f} ms,"
        f" p99 {run.bare.p99_ms:.2f} ms"
    )
    for v in run.variants:
        print(
            f"sluice, {v.name}: {v.result.rps:,.0f} req/s ({v.result.rps / run.bare.rps:.2f}),"
            f" p50 {v.result.p50_ms:.2f} ms, p99 {v.result.p99_ms:.2f} ms"
            f" ({v.result.p99_ms / run.bare.p99_ms:.2f}); served {v.served:,}"
            f" (wrk counted {v.result.requests:,})"
        )
        if v.result.non_3xx:
            print(f"  non-3xx answers: {v.result.non_3xx}")
    print(
        f"served {run.served:,}, visits committed: {run.committed:,}; link-stats total:"
        f" {run.total:,}; visits lost: {run.served - run.total}"
    )


def run_store(store: str, pg: Stores, args: argparse.Namespace) -> StoreRun:
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(
            SLUICE_REDIS_URL=server.url,
            SLUICE_ADMIN_TOKEN=ADMIN_TOKEN,
            SLUICE_LOG_FORMAT="json",
            SLUICE_LOG_LEVEL=args.log_level,
        )
        env.update(pg.env(store, Path(tmp) / "data"))
        try:
            return _run_store(store, env, Path(tmp), args)
        finally:
            pg.drop(env)


def _variants(args: argparse.Namespace) -> list[tuple[str, int, str, str, bool]]:
    """(name, processes, SLUICE_REDIRECT_LOG, code, pipeline during wrk) of each sluice
    run, in order."""
    found = []
    for code in (CODE, RULED) if args.rules else (CODE,):
        for log in args.redirect_log.split(","):
            for n in (int(p) for p in args.processes.split(",")):
                for when in args.pipeline.split(","):
                    name = (
                        f"{n} process{'es' if n > 1 else ''}"
                        + (" (log all)" if log == "all" else "")
                        + (" (3 rules)" if code == RULED else "")
                        + (" (pipeline after)" if when == "after" else "")
                    )
                    found.append((name, n, log, code, when == "during"))
    return found


def _run_store(store: str, env: dict[str, str], tmp: Path, args: argparse.Namespace) -> StoreRun:
    asyncio.run(create_link(env))
    if args.history:
        started = time.monotonic()
        asyncio.run(prefill(env, args.history))
        print(
            f"{store}: {args.history:,} visits committed in {time.monotonic() - started:.0f} s",
            flush=True,
        )
    quiet = {**env, "SLUICE_LOG_LEVEL": "warning"}

    def pipeline() -> list[subprocess.Popen[bytes]]:
        return [sluice(["relay"], quiet), sluice(["worker", "link-stats"], quiet)]

    children = pipeline()
    bare_port = free_port()
    bare = subprocess.Popen([sys.executable, __file__, "--bare", str(bare_port)])
    variants = []
    try:
        deadline = time.monotonic() + args.drain_timeout
        while asyncio.run(counted_visits(env)) < args.history:
            if time.monotonic() > deadline:
                raise SystemExit("--history: the visits were not counted in time")
            time.sleep(1.0)
        wait_listening(bare_port)
        print(
            f"{store}: wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency",
            flush=True,
        )
        bare_result = run_wrk(f"http://127.0.0.1:{bare_port}/{CODE}", args)
        for name, processes, log, code, during in _variants(args):
            if not during:  # stopped before the API starts, started again once it stopped
                stop(children)
            port = free_port()
            api_env = {**env, "SLUICE_PORT": str(port), "SLUICE_REDIRECT_LOG": log}
            api = sluice(["api", "--processes", str(processes)], api_env, tmp / f"api-{port}.log")
            try:
                wait_listening(port)
                time.sleep(2.0 if processes > 1 else 0.0)  # every child listening
                result = run_wrk(f"http://127.0.0.1:{port}/{code}", args)
                time.sleep(1.5)  # each process publishes its tally every second
                # The data dir's metrics hold the earlier variants' counts too.
                served = served_redirects(port) - sum(v.served for v in variants)
            finally:
                api.send_signal(signal.SIGTERM)  # commits what the writers still buffer
                api.wait(60)
                if not during:
                    children = pipeline()
            variants.append(Variant(name, result, served))
            if args.verbose:
                print(result.text)
        deadline = time.monotonic() + args.drain_timeout
        total, committed = asyncio.run(link_total(env))
        while total < committed and time.monotonic() < deadline:
            time.sleep(0.2)
            total, committed = asyncio.run(link_total(env))
    finally:
        stop([bare, *children])
    return StoreRun(store, bare_result, variants, total, committed - args.history)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(30)


def table(runs: list[StoreRun], args: argparse.Namespace) -> str:
    lines = [
        f"`wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency`, API log level"
        f" {args.log_level}; per store a bare run, then each sluice variant, one after the"
        ' other (`sluice api --processes N`; "log all": `SLUICE_REDIRECT_LOG=all`)'
        + (f", a history of {args.history:,} visits before (`--history`)" if args.history else "")
        + ":",
        "",
        "| store | variant | bare req/s | sluice req/s | throughput ratio (target >= 0.8) |"
        " bare p99 | sluice p99 | p99 ratio (target <= 1.5) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        for v in r.variants:
            lines.append(
                f"| {r.store} | {v.name} | {r.bare.rps:,.0f} | {v.result.rps:,.0f} |"
                f" **{v.result.rps / r.bare.rps:.2f}** | {r.bare.p99_ms:.2f} ms |"
                f" {v.result.p99_ms:.2f} ms | **{v.result.p99_ms / r.bare.p99_ms:.2f}** |"
            )
    lines.append("")
    for r in runs:
        lines.append(
            f"Visits lost on {r.store}: **{r.served - r.total}** ({r.served:,}"
            f" served in all variants, {r.committed:,} committed, {r.total:,}"
            " counted)."
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on PATH: apt-get install -y wrk")
    stores = parse_stores(args.store)
    runs = []
    with Stores(stores) as pg:
        for store in stores:
            run = run_store(store, pg, args)
            print(f"store: {store}")
            report(run)
            runs.append(run)
        label = pg.label()
    text = table(runs, args)
    print(text)
    if not args.no_readme:
        record("redirect", "redirect.py", text, extra=label)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-level", default="info", help="the API's SLUICE_LOG_LEVEL")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--verbose", action="store_true", help="print wrk's own output")
    parser.add_argument("--store", default="sqlite", help="sqlite, postgres or both")
    parser.add_argument("--processes", default="1,2", help="API processes per variant: 1,2")
    parser.add_argument("--redirect-log", default="errors", help="errors, all or errors,all")
    parser.add_argument("--rules", action="store_true", help="also a link with 3 rules")
    parser.add_argument(
        "--pipeline",
        default="during",
        help="the relay and link-stats during each variant's wrk run, after"
        " it (stopped while it runs), or during,after",
    )
    parser.add_argument("--history", type=int, default=0, help="visits committed before")
    parser.add_argument("--no-readme", action="store_true")
    options = parser.parse_args()
    if options.bare:
        bare_app(options.bare)
    else:
        sys.exit(main(options))
