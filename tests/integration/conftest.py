"""Integration fixtures: real store, real Redis, in-process relay and workers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest

from sluice.app.loading import default_apps
from sluice.builtin.articles.events import ArticleViewed
from sluice.config import Config
from sluice.operations.deliveries import DeliveryLog
from sluice.processes import runtime_settings
from sluice.redis_server import die_with_parent, free_port
from sluice.resources import Resources, open_resources, redis_client
from sluice.scheduler.reminders import ReminderRunner
from sluice.store import Store, open_store
from sluice.streams.consumer import Consumer
from sluice.streams.recovery import RecoveryGate
from sluice.streams.relay import Relay
from sluice.streams.spec import Counters, GroupSpec


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    timeout: float = 20.0,
    interval: float = 0.02,
) -> None:
    """Poll ``predicate`` until it holds; fail the test with a clear message if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s: {predicate.__qualname__}")


@pytest.fixture
async def store(config: Config) -> AsyncIterator[Store]:
    """The test's store alone (no Redis client), migrated."""
    opened = await open_store(config)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def resources(config: Config) -> AsyncIterator[Resources]:
    async with open_resources(config) as res:
        yield res


async def post_views(resources: Resources, article_id: str, n: int, *, start: int = 0) -> None:
    """Commit ``n`` views of one article, one transaction each, as the API does."""
    for i in range(start, start + n):
        async with resources.store.transaction() as tx:
            await tx.append(ArticleViewed(article_id=article_id, viewer=f"viewer-{i}"))


async def views(resources: Resources, article_id: str) -> int:
    row = await resources.store.fetchone(
        "SELECT views FROM article_views WHERE article_id = ?", (article_id,)
    )
    return int(row[0]) if row else 0


class Running:
    """Background tasks started by a test, stopped at teardown."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, coro: Awaitable[None]) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def close(self) -> None:
        """Stop every task and wait for it; a second call does nothing."""
        self.stop.set()
        tasks, self.tasks = self.tasks, []
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        for result in results:
            if isinstance(result, BaseException):
                raise result


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    tasks = Running()
    try:
        yield tasks
    finally:
        await tasks.close()


@pytest.fixture
def start_relay(resources: Resources, running: Running) -> Callable[..., Relay]:
    def start(**options: Any) -> Relay:
        config = resources.config
        relay = Relay(
            resources.store, resources.redis, resources.keys,
            batch=options.get("batch", config.relay_batch),
            poll_ms=options.get("poll_ms", config.relay_poll_ms),
            retention_s=config.stream_retention, groups=options.get("groups"),
        )  # fmt: skip
        resources.store.add_commit_listener(relay.wake.set)
        running.start(relay.run(running.stop))
        return relay

    return start


class Partitioned:
    """A group's consumers, one per partition, seen as one: counters summed, the rest
    (its name, settings, spec) the first one's."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = consumers

    @property
    def counters(self) -> Counters:
        total = Counters()
        for consumer in self.consumers:
            for name in ("handled", "retried", "dead", "claimed"):
                setattr(total, name, getattr(total, name) + getattr(consumer.counters, name))
        return total

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumers[0], name)


@pytest.fixture
async def start_worker(
    resources: Resources, running: Running
) -> AsyncIterator[Callable[..., Consumer]]:
    clients = []

    def start(
        group: str = "article-views",
        name: str = "w1",
        spec: GroupSpec | None = None,
        config: Config | None = None,
    ) -> Consumer:
        cfg = config or resources.config
        reader = redis_client(cfg, socket_timeout=cfg.worker_block_ms / 1000 + 5)
        clients.append(reader)
        spec = spec or default_apps().groups[group](resources)
        gate = RecoveryGate()  # the consumers of one call are one process's
        deliveries = DeliveryLog(resources.store)  # recorded as a worker process does
        settings = replace(runtime_settings(cfg), handler_timeout_s=cfg.handler_timeout(spec.name))
        consumers = [
            Consumer(spec, reader, resources.keys, name, settings, partition, gate, deliveries)
            for partition in resources.keys.numbers
        ]
        for consumer in consumers:
            running.start(consumer.run(running.stop))
        return consumers[0] if len(consumers) == 1 else cast(Consumer, Partitioned(consumers))

    yield start
    # The consumers must stop before their clients close, or they reconnect and leak.
    await running.close()
    for client in clients:
        await client.aclose()


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
        code = await asyncio.to_thread(self.process.wait, timeout)
        self.process = None
        return code

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def terminate(self) -> int | None:
        """SIGTERM and its exit code; a process still running 30 s later fails the test
        and is killed, so it cannot outlive it (and hold its ports)."""
        if self.process is None:
            return None
        process, self.process = self.process, None
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            raise


def child_env(config: Config, **extra: str) -> dict[str, str]:
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
    if config.postgres:
        env["SLUICE_DATABASE_URL"] = config.database_url
    if config.stream_partitions:
        env["SLUICE_STREAM_PARTITIONS"] = str(config.stream_partitions)
    if config.cluster:
        env["SLUICE_REDIS_CLUSTER_NODES"] = config.redis_cluster_nodes
        env["SLUICE_REDIS_PASSWORD"] = config.redis_password or ""
    env.update(extra)
    return env


@pytest.fixture
def spawn(config: Config) -> Iterator[Callable[..., Child]]:
    children: list[Child] = []

    def start(*args: str, log: Path | None = None, **extra_env: str) -> Child:
        """``log``: a file for the child's log lines (else they are discarded)."""
        child = Child(list(args), child_env(config, **extra_env)).start(log)
        children.append(child)
        return child

    yield start
    with contextlib.ExitStack() as stopping:  # every child, even if one fails to stop
        for child in children:
            stopping.callback(child.kill)


@pytest.fixture
async def replicas(spawn: Callable[..., Child]) -> AsyncIterator[list[str]]:
    """Two API processes on their own ports, answering."""
    ports = [free_port(), free_port()]
    for port in ports:
        spawn("api", SLUICE_PORT=str(port))
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    await wait_answering(urls)
    yield urls


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


@pytest.fixture
async def start_runners(
    config: Config, running: Running
) -> AsyncIterator[Callable[..., Awaitable[list[ReminderRunner]]]]:
    """Start runners, each on its own Resources; they stop before those close."""
    async with AsyncExitStack() as stack:

        async def start(count: int = 3, **options: Any) -> list[ReminderRunner]:
            runners = []
            for i in range(count):
                resources = await stack.enter_async_context(open_resources(config))
                runner = ReminderRunner(resources, holder=f"runner-{i}", **options)
                running.start(runner.run(running.stop))
                runners.append(runner)
            for runner in runners:
                await wait_for(loaded(runner))
            return runners

        yield start
        await running.close()


def loaded(runner: ReminderRunner) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return runner.loaded.is_set()

    return done
