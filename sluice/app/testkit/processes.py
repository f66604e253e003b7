"""A deployment's real processes for a test: their environment, starting and killing
them, and waiting for a condition instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import aiohttp
import msgspec

from sluice.config import AppValues, Config, load_config
from sluice.embedded.redis_server import die_with_parent

# The settings held by name (``Config.group_timeouts``...), each read back by
# ``load_config`` from ``SLUICE_<NAME>_<SUFFIX>``.
BY_NAME = {
    "group_timeouts": "TIMEOUT_SECONDS",
    "group_key_concurrency": "KEY_CONCURRENCY",
    "group_key_rates": "KEY_RATE",
    "group_rates": "RATE",
    "task_overlaps": "OVERLAP",
    "task_catchup_seconds": "CATCHUP_SECONDS",
    "task_jitter_seconds": "JITTER_SECONDS",
}


SLOWDOWN_MAX = 8.0


def slowdown() -> float:
    """How many times longer than on a quiet machine a wait may take now: the load average
    of the last minute per CPU this process may use, between 1 and ``SLOWDOWN_MAX``; at
    least ``SLUICE_TEST_SLOWDOWN`` when that is set (a runner known to be slow). Read anew
    at each call, so a wait that began on a quiet machine stretches as the load comes."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0] / cpus
    except OSError:  # no load average on this platform
        load = 1.0
    floor = float(os.environ.get("SLUICE_TEST_SLOWDOWN") or 1.0)
    return max(1.0, floor, min(load, SLOWDOWN_MAX))


def patience(seconds: float) -> float:
    """``seconds`` as measured on a quiet machine, stretched for this one's load now
    (``slowdown()``): a budget for a drain, a process's start, or how far ahead of now an
    instant must be to still be ahead once a slow setup is done."""
    return seconds * slowdown()


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    timeout: float = 20.0,
    interval: float = 0.02,
    *,
    message: str | None = None,
    exact: bool = False,
    progress: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Poll ``predicate`` until it holds; fail the test with a clear message (``message``,
    else the predicate's name) if it never does. ``timeout`` is a budget on a quiet
    machine, stretched while the machine is loaded (``slowdown()``, the most it was during
    the wait), so a slow run waits longer and a quiet one fails as soon as ever;
    ``exact``: the timeout is a bound the docs promise ("within a second on every
    replica") and is not stretched. ``progress``: a measure of the work still to do (the
    entries not yet acked, the mails sent); each time it changes the budget starts again,
    so a drain that moves is never cut short and one that is stuck fails a budget after
    its last step."""
    started = time.monotonic()
    stretch = 1.0
    seen = await progress() if progress is not None else None
    while True:
        if await predicate():
            return
        if progress is not None and (now := await progress()) != seen:
            seen, started = now, time.monotonic()
        waited = time.monotonic() - started
        if not exact:
            stretch = max(stretch, slowdown())
        if waited >= timeout * stretch:
            still = "" if progress is None else f" with no progress from {seen!r}"
            raise AssertionError(
                f"condition not met within {waited:.1f} s{still} ({timeout} s x {stretch:.1f}"
                f" for the machine's load): {message or predicate.__qualname__}"
            )
        await asyncio.sleep(interval)


async def wait_answering(urls: list[str], timeout: float = 30.0) -> None:
    """Until every API process at ``urls`` answers ``/healthz`` with 200; the failure
    names the URL that did not and what it answered last."""
    last: dict[str, str] = dict.fromkeys(urls, "nothing yet")
    async with aiohttp.ClientSession() as http:

        async def all_up() -> bool:
            for url in urls:
                try:
                    async with http.get(f"{url}/healthz") as response:
                        if response.status != 200:
                            last[url] = f"status {response.status}"
                            return False
                except aiohttp.ClientConnectionError as exc:
                    last[url] = f"{type(exc).__name__}: {exc}"
                    return False
            return True

        def waiting() -> str:
            down = [f"{url} ({last[url]})" for url in urls]
            return "no answer 200 to GET /healthz from " + ", ".join(down)

        deadline = time.monotonic() + timeout
        while not await all_up():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s: {waiting()}")
            await asyncio.sleep(0.02)


DERIVED = ("SLUICE_BASE_URL", "SLUICE_DATABASE_URL")


def environment_of(config: Config) -> dict[str, str]:
    """The ``SLUICE_*`` variables from which ``load_config`` builds ``config`` again: every
    field of ``Config``, so none is forgotten when a setting is added. Raises
    ``ValueError`` naming the fields an environment cannot carry (a value ``load_config``
    would read back as another, such as an empty text whose default is not)."""
    env: dict[str, str] = {}
    for field in msgspec.structs.fields(Config):
        value = getattr(config, field.name)
        if field.name == "app_values":  # the apps' own settings, each under its variable
            env.update({f"SLUICE_{name.upper()}": str(each) for name, each in value.values.items()})
        elif field.name in BY_NAME:
            for name, each in value.items():
                env[f"SLUICE_{name.upper().replace('-', '_')}_{BY_NAME[field.name]}"] = str(each)
        elif value is not None:
            env[f"SLUICE_{field.name.upper()}"] = str(value)
    # Settings the loader derives from others (the base URL from the host and port, the
    # SQLite file from the data dir) are left out where derived, so that a child given
    # another port or data dir (``SLUICE_PORT=...`` on top) derives them from those.
    for name in DERIVED:
        shorter = {k: v for k, v in env.items() if k != name}
        if not _differences(config, load_config(shorter)):
            env = shorter
    lost = _differences(config, load_config(env))
    if lost:
        raise ValueError(f"no environment carries these settings as they are: {lost}")
    return env


def _differences(wanted: Config, found: Config) -> list[str]:
    names = [field.name for field in msgspec.structs.fields(Config)]
    return [
        f"{name}={getattr(wanted, name)!r} (read back as {getattr(found, name)!r})"
        for name in names
        if _carried(getattr(wanted, name), getattr(wanted, name))
        != _carried(getattr(found, name), getattr(wanted, name))
    ]


def _carried(value: object, wanted: object) -> object:
    # The apps' settings travel as text, each app reads them back as its own types; a
    # child also finds there the SLUICE_<NAME>_TIMEOUT_SECONDS... words sent beside them.
    if isinstance(value, AppValues) and isinstance(wanted, AppValues):
        return {name: str(value.values.get(name)) for name in wanted.values}
    return value


def child_env(config: Config, **extra: str) -> dict[str, str]:
    """The environment of a child process of ``config``'s deployment (``extra`` on top):
    every setting of ``config`` (its port, Redis, database, apps, timings...), and none of
    the parent's own ``SLUICE_*`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(environment_of(config))
    env.update(extra)
    return env


async def sluice_command(
    config: Config, *args: str, timeout: float = 60.0, **env: str
) -> subprocess.CompletedProcess[str]:
    """``sluice *args`` of ``config``'s deployment, run to its end: its exit code, stdout
    and stderr (``sluice replay customer-totals``, ``sluice tasks run NAME``...)."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "sluice", *args],
        env=child_env(config, **env),
        capture_output=True,
        text=True,
        timeout=patience(timeout),
    )


class Child:
    """A real ``sluice`` child process, for kill -9 tests (``module``: another
    ``python -m`` entry point, such as a test's own worker script)."""

    def __init__(self, args: list[str], env: Mapping[str, str], module: str = "sluice") -> None:
        self.args = args
        self.env = dict(env)
        self.module = module
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, log: Path | None = None) -> Child:
        """Start it; with ``log``, its stderr (the JSON log lines) goes to that file."""
        with contextlib.ExitStack() as files:
            stderr = files.enter_context(log.open("ab")) if log else subprocess.DEVNULL
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                preexec_fn=die_with_parent(),  # pytest killed hard: no orphans keep ports
            )
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup, no ack, no flush; as a crash."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    async def wait(self, timeout: float = 30.0) -> int:
        """The exit code, once the process has ended on its own."""
        assert self.process is not None
        code = await asyncio.to_thread(self.process.wait, patience(timeout))
        self.process = None
        return code

    @property
    def pid(self) -> int:
        """The process id of the running child."""
        assert self.process is not None
        return self.process.pid

    def terminate(self) -> int | None:
        """SIGTERM and its exit code; a process still running 30 s later (on a quiet
        machine: ``patience``) fails the test and is killed, so it cannot outlive it (and
        hold its ports)."""
        if self.process is None:
            return None
        process, self.process = self.process, None
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(patience(30))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            raise
