"""Redirect throughput with visit recording, against a bare aiohttp 302 handler (SPEC §8).

Run by hand: ``.venv/bin/python bench/redirect.py [--duration 15] [--connections 64]
[--threads 2] [--log-level info] [--store sqlite|postgres|sqlite,postgres]``. Needs
``wrk`` on PATH (``apt-get install wrk``).

With ``--store sqlite,postgres`` the whole measurement below runs once per store
in the same run (PostgreSQL: a private server with fsync on, see ``stores.py``),
each store with its own bare run right before it, and the figures go into
bench/README.md (``--no-readme``: don't).

Starts its own Redis on a free loopback port, a store in a temporary directory,
one ``sluice api``, one ``sluice relay`` and one ``sluice worker link-stats``
process, and a bare aiohttp app that only answers 302 (another process, another
port). wrk hits the bare app, then ``GET /{code}`` on sluice, with the same
settings, one after the other in the same run. Then the API is stopped
(SIGTERM: it commits what its writer still buffers), the pipeline drains, and
the link's ``total`` is compared with the redirects the API served (its
request log lines with status 302: wrk does not count responses still in
flight when its time is up, so the server's own count is the truth).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from readme import record
from stores import Stores, parse_stores

from sluice.config import load_config
from sluice.events import LinkCreated, utcnow
from sluice.redis_server import RedisServer, free_port
from sluice.store import open_store
from sluice.store.users import db_time

CODE = "bench1"
TARGET = "https://example.org/landing"


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
    command = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s",
               "--latency", url]  # fmt: skip
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
            await tx.execute(
                "INSERT INTO links (code, owner_id, url, expires_at, disabled, created_at,"
                " updated_at) VALUES (?, 'bench', ?, NULL, 0, ?, ?)",
                (CODE, TARGET, now, now),
            )
            await tx.append(LinkCreated(code=CODE, owner_id="bench", url=TARGET))
    finally:
        await store.close()


async def link_total(env: dict[str, str]) -> tuple[int, int]:
    """(link-stats total of the link, LinkVisited events committed)."""
    store = await open_store(load_config(env))
    try:
        row = await store.fetchone("SELECT total FROM link_stats WHERE code = ?", (CODE,))
        events = await store.fetchone("SELECT COUNT(*) FROM events WHERE type = 'LinkVisited'")
    finally:
        await store.close()
    return (int(row[0]) if row else 0), (int(events[0]) if events else 0)


def wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def served_redirects(log: Path) -> int:
    """GET /{code} answered 302, from the API's request log."""
    count = 0
    for line in log.read_text().splitlines():
        if '"request"' not in line:
            continue
        entry = json.loads(line)
        ok = entry.get("status") == 302 and entry.get("method") == "GET"
        count += ok and entry.get("path") == f"/{CODE}"
    return count


def sluice(
    args: list[str], env: dict[str, str], log: Path | None = None
) -> subprocess.Popen[bytes]:
    stderr = log.open("wb") if log else None
    try:
        return subprocess.Popen([sys.executable, "-m", "sluice", *args], env=env,
                                stdout=subprocess.DEVNULL,
                                stderr=stderr or subprocess.DEVNULL)  # fmt: skip
    finally:
        if stderr is not None:
            stderr.close()  # the child holds its own copy


def machine() -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")), "unknown cpu",
    )  # fmt: skip
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    version = re.search(r"v=(\S+)", redis)
    return (f"{os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}, "
            f"Redis {version[1] if version else '?'}")  # fmt: skip


def report(bare: WrkResult, ours: WrkResult, served: int, total: int, committed: int) -> None:
    ratio = ours.rps / bare.rps
    p99 = ours.p99_ms / bare.p99_ms
    print(f"machine: {machine()}")
    print(f"{'':24}{'bare aiohttp 302':>18}{'sluice GET /{code}':>20}")
    print(f"{'requests/s':24}{bare.rps:>18,.0f}{ours.rps:>20,.0f}")
    print(f"{'p50 latency (ms)':24}{bare.p50_ms:>18.2f}{ours.p50_ms:>20.2f}")
    print(f"{'p99 latency (ms)':24}{bare.p99_ms:>18.2f}{ours.p99_ms:>20.2f}")
    print(f"{'requests (wrk)':24}{bare.requests:>18,}{ours.requests:>20,}")
    print(f"throughput ratio: {ratio:.2f} (target >= 0.80)  p99 ratio: {p99:.2f} (target <= 1.5)")
    if served < 0:
        print("redirects served: not counted (the API's request log is off below info);"
              " visits lost cannot be checked at this log level")  # fmt: skip
        served = total
    else:
        print(f"redirects served (API log): {served:,}; wrk counted {ours.requests:,}"
              f" (+ {served - ours.requests} answered after wrk stopped reading)")  # fmt: skip
    print(f"visits committed: {committed:,}; link-stats total: {total:,};"
          f" visits lost: {served - total}")  # fmt: skip
    if ours.non_3xx or bare.non_3xx:
        print(f"non-3xx answers: bare {bare.non_3xx}, sluice {ours.non_3xx}")


@dataclass
class StoreRun:
    store: str
    bare: WrkResult
    ours: WrkResult
    served: int
    total: int
    committed: int


def run_store(store: str, pg: Stores, args: argparse.Namespace) -> StoreRun:
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        api_port, bare_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(SLUICE_REDIS_URL=server.url,
                   SLUICE_LOG_FORMAT="json", SLUICE_LOG_LEVEL=args.log_level,
                   SLUICE_PORT=str(api_port))  # fmt: skip
        env.update(pg.env(store, Path(tmp) / "data"))
        try:
            return _run_store(store, env, api_port, bare_port, Path(tmp), args)
        finally:
            pg.drop(env)


def _run_store(
    store: str,
    env: dict[str, str],
    api_port: int,
    bare_port: int,
    tmp: Path,
    args: argparse.Namespace,
) -> StoreRun:
    asyncio.run(create_link(env))
    api_log = tmp / "api.log"
    quiet = {**env, "SLUICE_LOG_LEVEL": "warning"}
    children = [sluice(["relay"], quiet), sluice(["worker", "link-stats"], quiet)]
    api = sluice(["api"], env, api_log)
    bare = subprocess.Popen([sys.executable, __file__, "--bare", str(bare_port)])
    try:
        wait_listening(api_port)
        wait_listening(bare_port)
        print(f"{store}: wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency",
              flush=True)  # fmt: skip
        bare_result = run_wrk(f"http://127.0.0.1:{bare_port}/{CODE}", args)
        ours = run_wrk(f"http://127.0.0.1:{api_port}/{CODE}", args)
        api.send_signal(signal.SIGTERM)  # commits what the writer still buffers
        api.wait(30)
        served = served_redirects(api_log) if args.log_level in ("debug", "info") else -1
        deadline = time.monotonic() + args.drain_timeout
        total, committed = asyncio.run(link_total(env))
        while total < committed and time.monotonic() < deadline:
            time.sleep(0.2)
            total, committed = asyncio.run(link_total(env))
    finally:
        for process in (api, bare, *children):
            process.send_signal(signal.SIGTERM)
        for process in (api, bare, *children):
            process.wait(30)
    if args.verbose:
        print(bare_result.text, ours.text)
    return StoreRun(store, bare_result, ours, served, total, committed)


def table(runs: list[StoreRun], args: argparse.Namespace) -> str:
    lines = [
        f"`wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency`, API log level"
        f" {args.log_level}; per store a bare run, then sluice, one after the other:", "",
        "| store | bare req/s | sluice req/s | throughput ratio (target >= 0.8) | bare p99 |"
        " sluice p99 | p99 ratio (target <= 1.5) | visits lost |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in runs:
        served = r.served if r.served >= 0 else r.total
        lost = (f"**{served - r.total}** ({served:,} served, {r.committed:,} committed,"
                f" {r.total:,} counted)" if r.served >= 0
                else f"not checked ({r.committed:,} committed, {r.total:,} counted)")  # fmt: skip
        lines.append(
            f"| {r.store} | {r.bare.rps:,.0f} | {r.ours.rps:,.0f} |"
            f" **{r.ours.rps / r.bare.rps:.2f}** | {r.bare.p99_ms:.2f} ms |"
            f" {r.ours.p99_ms:.2f} ms | **{r.ours.p99_ms / r.bare.p99_ms:.2f}** | {lost} |"
        )  # fmt: skip
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
            report(run.bare, run.ours, run.served, run.total, run.committed)
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
    parser.add_argument("--no-readme", action="store_true")
    options = parser.parse_args()
    if options.bare:
        bare_app(options.bare)
    else:
        sys.exit(main(options))
