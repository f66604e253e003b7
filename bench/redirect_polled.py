"""Redirects per second while clients poll a user's 100 rare-cron reminders (issue 20, finding 1).

Run by hand: ``.venv/bin/python bench/redirect_polled.py [--duration 10] [--rounds 3]
[--connections 64] [--threads 2] [--pollers 4] [--poll-interval 1.0]
[--store sqlite|postgres|sqlite,postgres]``. Needs ``wrk`` (``apt-get install wrk``).

Per store: its own Redis, store, ``sluice api``, ``sluice relay`` and ``sluice worker
link-stats`` (as ``redirect.py`` starts them), a link, and a user with the most active
reminders one user may have (100), each on 29 February falling on a Sunday
(``<s> <m> 0 29 2 */7``: next runs 2032, 2060, 2088), created through the API. Then
wrk hits ``GET /{code}`` with the same settings in ``--rounds`` pairs of runs, one
right after the other: alone (idle), then while ``--pollers`` clients (another
process) each ask ``GET /v1/reminders`` for that user every ``--poll-interval``
seconds (0: as fast as the answers come). Alternating spreads the drift of a shared
machine (and of a store that grows with every visit) over both kinds of run. Target:
the polled runs within 10 % of the idle ones. The figures go into bench/README.md
(``--no-readme``: don't).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from readme import record
from redirect import CODE, WrkResult, create_link, machine, run_wrk, sluice, wait_listening
from stores import Stores, parse_stores

from sluice.embedded.redis_server import RedisServer, free_port

REMINDERS = 100  # the most active reminders one user may have
USER = {"email": "poller@example.org", "password": "correct horse battery", "name": "Poller"}


def rare(n: int) -> str:
    return f"{n % 60} {n // 60} 0 29 2 */7"


async def make_reminders(base: str) -> str:
    """Register a user, create its 100 rare reminders; its bearer token."""
    async with aiohttp.ClientSession(base) as http:
        async with http.post("/v1/users", json=USER) as response:
            assert response.status == 201, await response.text()
        login = {"email": USER["email"], "password": USER["password"]}
        async with http.post("/v1/tokens", json=login) as response:
            assert response.status == 201, await response.text()
            token = str((await response.json())["token"])
        auth = {"Authorization": f"Bearer {token}"}
        for n in range(REMINDERS):
            body = {"cron": rare(n), "timezone": "UTC", "text": f"leap day {n}"}
            async with http.post("/v1/reminders", json=body, headers=auth) as response:
                assert response.status == 201, await response.text()
        async with http.get("/v1/reminders", headers=auth) as response:
            items = (await response.json())["items"]
            assert len(items) == REMINDERS and all(i["next_runs"] for i in items)
    return token


async def _poll(
    url: str, token: str, clients: int, interval: float, stop: asyncio.Event
) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0

    async def client(http: aiohttp.ClientSession) -> None:
        nonlocal errors
        while not stop.is_set():
            started = time.perf_counter()
            async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as response:
                await response.read()
                errors += response.status != 200
            latencies.append(time.perf_counter() - started)
            pause = interval - (time.perf_counter() - started)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    latencies.sort()

    def pct(p: float) -> float:
        if not latencies:
            return 0.0
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"polls": len(latencies), "errors": errors, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


def poller(url: str, token: str, clients: int, interval: float) -> None:
    """The pollers' process: poll until SIGTERM, then print what was seen as JSON."""

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print(json.dumps(await _poll(url, token, clients, interval, stop)), flush=True)

    asyncio.run(main())


@dataclass
class Polled:
    store: str
    idle: list[WrkResult]
    polled: list[WrkResult]
    polls: list[dict[str, float]]

    @staticmethod
    def mean(runs: list[WrkResult], field: str) -> float:
        return sum(float(getattr(run, field)) for run in runs) / len(runs)

    @property
    def ratio(self) -> float:
        return self.mean(self.polled, "rps") / self.mean(self.idle, "rps")


def polled_run(
    base: str, token: str, args: argparse.Namespace
) -> tuple[WrkResult, dict[str, float]]:
    pollers = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--poll",
            f"{base}/v1/reminders",
            token,
            str(args.pollers),
            str(args.poll_interval),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        result = run_wrk(f"{base}/{CODE}", args)
    finally:
        pollers.send_signal(signal.SIGTERM)
        out, _ = pollers.communicate(timeout=30)
    return result, json.loads(out)


def run_store(store: str, pg: Stores, args: argparse.Namespace) -> Polled:
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(
            SLUICE_REDIS_URL=server.url,
            SLUICE_LOG_FORMAT="json",
            SLUICE_LOG_LEVEL=args.log_level,
            SLUICE_PORT=str(port),
        )
        env.update(pg.env(store, Path(tmp) / "data"))
        asyncio.run(create_link(env))
        quiet = {**env, "SLUICE_LOG_LEVEL": "warning"}
        children = [
            sluice(["relay"], quiet),
            sluice(["worker", "link-stats"], quiet),
            sluice(["api"], env),
        ]
        try:
            wait_listening(port)
            base = f"http://127.0.0.1:{port}"
            token = asyncio.run(make_reminders(base))
            print(
                f"{store}: {args.rounds} x (wrk -t{args.threads} -c{args.connections}"
                f" -d{args.duration}s idle, then with {args.pollers} pollers)",
                flush=True,
            )
            run = Polled(store, [], [], [])
            for _ in range(args.rounds):
                run.idle.append(run_wrk(f"{base}/{CODE}", args))
                result, polls = polled_run(base, token, args)
                run.polled.append(result)
                run.polls.append(polls)
                print(
                    f"  idle {run.idle[-1].rps:,.0f} req/s, polled {result.rps:,.0f} req/s"
                    f" ({polls['polls']:.0f} lists)",
                    flush=True,
                )
            return run
        finally:
            for child in children:
                child.send_signal(signal.SIGTERM)
            for child in children:
                child.wait(30)
            pg.drop(env)


def table(runs: list[Polled], args: argparse.Namespace) -> str:
    every = f"every {args.poll_interval:g} s" if args.poll_interval > 0 else "back to back"
    lines = [
        f"{args.rounds} pairs of `wrk -t{args.threads} -c{args.connections} -d{args.duration}s"
        f" --latency` runs on `GET /{{code}}`, alone and then while {args.pollers} clients each"
        f" ask `GET /v1/reminders` {every} for a user with {REMINDERS} reminders on 29"
        f" February falling on a Sunday; API log level {args.log_level}; means of the runs"
        " (each run's req/s in brackets):",
        "",
        "| store | idle req/s | polled req/s | ratio (target >= 0.90) | idle p99 | polled p99 |"
        " lists answered | list p50 | list p99 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        errors = sum(int(p["errors"]) for p in r.polls)
        each_idle = ", ".join(f"{x.rps:,.0f}" for x in r.idle)
        each_polled = ", ".join(f"{x.rps:,.0f}" for x in r.polled)
        lines.append(
            f"| {r.store} | {r.mean(r.idle, 'rps'):,.0f} ({each_idle}) |"
            f" {r.mean(r.polled, 'rps'):,.0f} ({each_polled}) | **{r.ratio:.2f}** |"
            f" {r.mean(r.idle, 'p99_ms'):.2f} ms | {r.mean(r.polled, 'p99_ms'):.2f} ms |"
            f" {sum(int(p['polls']) for p in r.polls):,}"
            f"{f' ({errors} not 200)' if errors else ''} |"
            f" {max(p['p50_ms'] for p in r.polls):.1f} ms |"
            f" {max(p['p99_ms'] for p in r.polls):.1f} ms |"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    stores = parse_stores(args.store)
    runs = []
    with Stores(stores) as pg:
        for store in stores:
            runs.append(run_store(store, pg, args))
        label = pg.label()
    text = table(runs, args)
    print(f"machine: {machine()}")
    print(text)
    if not args.no_readme:
        record("redirect-polled", "redirect_polled.py", text, extra=label)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--poll", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="pairs of idle and polled runs")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pollers", type=int, default=4)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        help="seconds between one client's lists; 0: back to back",
    )
    parser.add_argument("--log-level", default="info", help="the API's SLUICE_LOG_LEVEL")
    parser.add_argument("--store", default="sqlite", help="sqlite, postgres or both")
    parser.add_argument("--no-readme", action="store_true")
    options = parser.parse_args()
    if options.poll:
        url, token, clients, interval = options.poll
        poller(url, token, int(clients), float(interval))
    else:
        sys.exit(main(options))
