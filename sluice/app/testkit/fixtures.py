"""The pytest fixtures of ``sluice.app.testing`` (see its docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from sluice.app.assembly import assemble
from sluice.app.testkit.harness import Harness, open_harness
from sluice.app.testkit.processes import Child, child_env, slowdown
from sluice.config import Config, load_config
from sluice.embedded.postgres_server import PostgresServer
from sluice.embedded.redis_cluster_server import RedisCluster
from sluice.embedded.redis_server import RedisServer

STORES = ("sqlite", "postgres")
TOPOLOGIES = ("single", "cluster")
# What every test configuration has: a fixed visitor key (no secret file to make), the
# logs of a process in a test, and timings a test can wait for (retries after 50 ms,
# stalled entries reclaimed after 1 s).
TEST_SETTINGS: dict[str, Any] = {
    "log_format": "json",
    "log_level": "warning",
    "visitor_key": "test-visitor-key",
    "retry_base_ms": 50,
    "claim_idle_ms": 1000,
    "worker_block_ms": 200,
    "relay_poll_ms": 200,
}


def _wanted(variable: str, known: tuple[str, ...]) -> tuple[str, ...]:
    wanted = os.environ.get(variable)
    if not wanted:
        return known
    chosen = tuple(s.strip() for s in wanted.split(",") if s.strip())
    if set(chosen) - set(known):
        raise pytest.UsageError(f"{variable}: {wanted!r}; known: {known}")
    return chosen


def _stores_wanted() -> tuple[str, ...]:
    return _wanted("SLUICE_TEST_STORES", STORES)


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sluice_store_kind" in metafunc.fixturenames:
        metafunc.parametrize("sluice_store_kind", _stores_wanted())
    if "sluice_topology" in metafunc.fixturenames:
        # The variable also narrows sluice's own suite, which knows "partitioned" too.
        wanted = _wanted("SLUICE_TEST_TOPOLOGIES", (*TOPOLOGIES, "partitioned"))
        metafunc.parametrize("sluice_topology", [t for t in wanted if t in TOPOLOGIES])


def _running(server: RedisServer) -> Iterator[RedisServer]:
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def sluice_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private ``redis-server`` for this test, killed after it."""
    yield from _running(RedisServer(tmp_path / "redis"))


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


@pytest.fixture(scope="session")
def sluice_redis_cluster() -> Iterator[RedisCluster]:
    """A private Redis Cluster for the session (3 primaries, 3 replicas, a password),
    started on first use and removed after the session."""
    cluster = RedisCluster(Path(tempfile.mkdtemp(prefix="sluice-app-test-cluster-")))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.data_dir, ignore_errors=True)


def cluster_settings(cluster: RedisCluster) -> dict[str, Any]:
    """The settings of a deployment on ``cluster``, its primaries flushed for this test."""
    cluster.wait_ready()
    cluster.flush()
    # As deployed: the cluster's nodes alone, no SLUICE_REDIS_URL beside them.
    return {
        "redis_cluster_nodes": cluster.seeds,
        "redis_password": cluster.password,
        "redis_url": None,
    }


def _redis_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The Redis of the test's ``sluice_topology`` if it has one (the session's cluster,
    every primary flushed for this test), else its private ``sluice_redis``."""
    in_topology = "sluice_topology" in request.fixturenames
    if in_topology and request.getfixturevalue("sluice_topology") == "cluster":
        return cluster_settings(request.getfixturevalue("sluice_redis_cluster"))
    server: RedisServer = request.getfixturevalue("sluice_redis")
    return {"redis_url": server.url}


@pytest.fixture
def sluice_config(
    tmp_path: Path, sluice_database_url: str, request: pytest.FixtureRequest
) -> Callable[..., Config]:
    """``sluice_config(apps, **settings)``: the test's configuration (its data dir,
    database and Redis: a cluster when the test's ``sluice_topology`` is one), with the
    quick timings tests want; any other setting by its field name (``port=free_port()``)."""
    redis_settings = _redis_settings(request)

    def make(apps: str = "", **settings: Any) -> Config:
        values: dict[str, Any] = {
            "apps": apps,
            "data_dir": tmp_path / "data",
            "database_url": sluice_database_url,
            **redis_settings,
            **TEST_SETTINGS,
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


@pytest.fixture(scope="session")
def sluice_harness_redis() -> Iterator[RedisServer]:
    """The ``redis-server`` of the session's harnesses, each under a key prefix of its
    own (its keys deleted when it closes)."""
    root = Path(tempfile.mkdtemp(prefix="sluice-harness-redis-"))
    try:
        yield from _running(RedisServer(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Templates:
    """Databases migrated once per session and set of apps, copied for each harness (a
    copy takes milliseconds, the migrations of every built-in app a few hundred)."""

    def __init__(self, root: Path, request: pytest.FixtureRequest) -> None:
        self.root = root
        self.request = request
        self.made: dict[tuple[str, str], str] = {}
        self.count = itertools.count(1)

    async def database(self, store: str, apps: str, data_dir: Path) -> str:
        """A fresh database of ``apps``' schema on ``store``: its URL ("" for SQLite, a
        file in ``data_dir``)."""
        if store not in STORES:
            raise ValueError(f"store {store!r}: one of {', '.join(STORES)}")
        template = self.made.get((store, apps))
        if template is None:
            template = self.made[store, apps] = await self._migrated(store, apps)
        if store == "sqlite":
            await asyncio.to_thread(shutil.copytree, template, data_dir)
            return ""
        return self._postgres().create_database(f"t_{uuid.uuid4().hex[:16]}", template=template)

    async def _migrated(self, store: str, apps: str) -> str:
        n = next(self.count)
        if store == "sqlite":
            url, made = "", str(self.root / f"template-{n}")
        else:
            made = f"harness_template_{n}"
            url = self._postgres().create_database(made, template="template0")
        config = load_config(
            {}, apps=apps, data_dir=self.root / f"template-{n}", database_url=url, **TEST_SETTINGS
        )
        await (await assemble(config).open_store()).close()
        return made

    def _postgres(self) -> PostgresServer:
        server: PostgresServer = self.request.getfixturevalue("sluice_postgres")
        return server


@pytest.fixture(scope="session")
def sluice_harness_templates(request: pytest.FixtureRequest) -> Iterator[Templates]:
    """The migrated databases the session's harnesses are copied from."""
    root = Path(tempfile.mkdtemp(prefix="sluice-harness-templates-"))
    try:
        yield Templates(root, request)
    finally:
        shutil.rmtree(root, ignore_errors=True)


_harnesses = itertools.count(1)


@pytest.fixture
async def sluice_harness(
    tmp_path: Path, sluice_harness_templates: Templates, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    """``await sluice_harness(apps, store="sqlite", **settings)``: an open ``Harness`` of
    a deployment running ``apps`` (``SLUICE_APPS``) on a fresh database (``"sqlite"``, or
    ``"postgres"`` on the session's PostgreSQL server) and the session's harness Redis;
    closed after the test."""
    redis_server: RedisServer = request.getfixturevalue("sluice_harness_redis")
    async with AsyncExitStack() as opened:

        async def make(apps: str = "", *, store: str = "sqlite", **settings: Any) -> Harness:
            n = next(_harnesses)
            data_dir = tmp_path / f"harness-{n}"
            values: dict[str, Any] = {
                "apps": apps,
                "data_dir": data_dir,
                "database_url": await sluice_harness_templates.database(store, apps, data_dir),
                "redis_url": redis_server.url,
                "stream_prefix": f"harness{n}-{uuid.uuid4().hex[:8]}",
                **TEST_SETTINGS,
                **settings,
            }
            config = load_config({}, **values)
            opened.push_async_callback(_forget_keys, redis_server.url, config.stream_prefix)
            return await opened.enter_async_context(open_harness(config))

        yield make


async def _forget_keys(url: str, prefix: str) -> None:
    """Delete a closed harness's keys from the session's Redis."""
    client = aioredis.Redis.from_url(url)
    try:
        async for keys in _batches(client.scan_iter(match=f"{prefix}:*", count=1000)):
            await client.delete(*keys)
    finally:
        await client.aclose()


async def _batches(keys: AsyncIterator[bytes], size: int = 500) -> AsyncIterator[list[bytes]]:
    batch: list[bytes] = []
    async for key in keys:
        batch.append(key)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
