"""Fixtures shared by every suite: a private Redis per test, the store, a config factory.

``make_config``/``config`` is the testing plugin's ``sluice_config`` (``sluice.app.testing``,
as an app's tests have it) on this suite's database and Redis topology. Every test that
uses the store (through ``make_config``/``config``, or ``database_url``) runs once per
backend, named in its id: ``[sqlite]`` and ``[postgres]``. PostgreSQL is one private
server for the session (started on first use, on a free port, from the binaries
``sluice.embedded.postgres_server`` finds), with a fresh database per test copied from a
migrated template.
``SLUICE_TEST_STORES=sqlite`` (or ``postgres``) narrows a run to one backend;
``@pytest.mark.stores("sqlite")`` pins a test that is about one backend.

Redis has topologies in the same way, but a test runs on one Redis with one partition
(``single``) unless it is marked ``@pytest.mark.topologies(...)``: ``partitioned`` is
the same private Redis with ``PARTITIONS`` stream partitions, ``cluster`` a private
Redis Cluster (3 primaries, 3 replicas; one per test session and xdist worker, every
primary flushed before each test) with the cluster's default partitions.
``SLUICE_TEST_TOPOLOGIES=single,partitioned`` narrows a run. The two other topologies
run on SQLite only, but for slow (process-level) tests, which run them on both stores.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from hypothesis.configuration import set_hypothesis_home_dir

from sluice.app.assembly import default_apps
from sluice.app.testkit.fixtures import cluster_settings
from sluice.app.testkit.served import ServedAsApi
from sluice.config import Config
from sluice.embedded.postgres_server import PostgresServer
from sluice.embedded.redis_cluster_server import RedisCluster
from sluice.embedded.redis_server import RedisServer
from sluice.http.app_keys import CONFIG
from sluice.process.resources import redis_client
from sluice.store.postgres import PostgresStore
from tests.app_helpers import app_dir  # noqa: F401  (a fixture: apps written on the fly)
from tests.databases import TEMPLATE, Databases
from tests.lowest_set import mark_lowest

# Every process of a deployment is assembled as it starts (its apps' event types join
# the codec); the test process assembles the default apps, as one without SLUICE_APPS.
default_apps()

# sluice.app.testing: the fixtures an app's tests get; sluice's own use them too.
pytest_plugins = ["sluice.app.testing"]

STORES = ("sqlite", "postgres")
TOPOLOGIES = ("single", "partitioned", "cluster")
PARTITIONS = 4

_hypothesis_home: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis (and schemathesis through it) keeps files under ./.hypothesis even
    # without an example database; keep them out of the work tree, for this run only.
    global _hypothesis_home
    _hypothesis_home = Path(tempfile.mkdtemp(prefix="sluice-hypothesis-"))
    set_hypothesis_home_dir(_hypothesis_home)
    config.addinivalue_line(
        "markers", "apps(names): make_config's SLUICE_APPS (tests.engine_app.APPS, say)"
    )


def _wanted(variable: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    """The comma-separated names in ``variable`` (all of ``choices`` when unset)."""
    wanted = os.environ.get(variable)
    if not wanted:
        return choices
    chosen = tuple(s.strip() for s in wanted.split(",") if s.strip())
    unknown = set(chosen) - set(choices)
    if unknown:
        raise pytest.UsageError(f"{variable}: unknown {sorted(unknown)}; known: {choices}")
    return chosen


def _stores_wanted() -> tuple[str, ...]:
    return _wanted("SLUICE_TEST_STORES", STORES)


def _topologies_wanted() -> tuple[str, ...]:
    return _wanted("SLUICE_TEST_TOPOLOGIES", TOPOLOGIES)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One run per backend for every test that reaches the store; one per topology for
    a test marked with ``topologies``."""
    if "store_kind" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("stores")
        kinds = [k for k in (marker.args if marker else STORES) if k in _stores_wanted()]
        metafunc.parametrize("store_kind", kinds)
    topologies = metafunc.definition.get_closest_marker("topologies")
    if topologies is not None and "topology" in metafunc.fixturenames:
        wanted = [t for t in topologies.args if t in _topologies_wanted()]
        metafunc.parametrize("topology", wanted)


# tryfirst: the ``lowest`` marks must be on before ``-m`` selects by them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``partitioned`` and ``cluster`` topologies on SQLite only, except in slow
    (process-level) tests: what partitions change is Redis-side, and the store's side of
    it (the relay's reconcile) is the same SQL on both; the slow ones (Redis faults,
    the cluster failover, crashes) keep both stores. Keeps the suite in its time.
    And the ``lowest`` mark on the tests ``tests.lowest_set`` names."""
    mark_lowest(config, items)
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        other = params.get("topology", "single") != "single"
        if other and params.get("store_kind") == "postgres" and not item.get_closest_marker("slow"):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    # The longest first (the chaos runs, the wheel, the fault tests), each file's order
    # kept: they start while the short ones fill the other workers, instead of one of
    # them ending the run alone while the others wait.
    items.sort(key=_longest_first)


def _longest_first(item: pytest.Item) -> int:
    for rank, mark in enumerate(("chaos", "wheel", "slow")):
        if item.get_closest_marker(mark):
            return rank
    return 3


@pytest.fixture
def topology() -> str:
    """The Redis of a test not marked with ``topologies``: one server, one partition."""
    return "single"


def pytest_unconfigure(config: pytest.Config) -> None:
    if _hypothesis_home is not None:
        shutil.rmtree(_hypothesis_home, ignore_errors=True)


@pytest.fixture
def redis_server(sluice_redis: RedisServer) -> RedisServer:
    """A redis-server child on a free loopback port, with AOF under tmp_path (the app
    testing plugin's: sluice's tests use it as an app's tests do)."""
    return sluice_redis


@pytest.fixture(scope="session")
def databases(sluice_postgres: PostgresServer) -> Iterator[Databases]:
    """Fresh databases copied from a migrated template, on the session's PostgreSQL server
    (the app testing plugin's ``sluice_postgres``, as the app harness's templates are)."""
    asyncio.run(_migrate(sluice_postgres.create_database(TEMPLATE, template="template0")))
    made = Databases(sluice_postgres)
    try:
        yield made
    finally:
        made.close()


async def _migrate(url: str) -> None:
    """sluice's schema and the default apps', as ``open_store`` migrates a deployment."""
    store = await PostgresStore.open(url, pool_size=1, steps=default_apps().migrations)
    await store.close()


@pytest.fixture
def database_url(store_kind: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """This test's database: None for SQLite (the file in the data dir), else a fresh
    PostgreSQL database, dropped afterwards."""
    if store_kind == "sqlite":
        yield None
        return
    databases: Databases = request.getfixturevalue("databases")
    name, url = databases.take()
    yield url
    databases.finished(name)


@pytest.fixture
def empty_database_url(store_kind: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """Like ``database_url``, but a PostgreSQL database without any schema yet."""
    if store_kind == "sqlite":
        yield None
        return
    databases: Databases = request.getfixturevalue("databases")
    name, url = databases.take(template="template0")
    yield url
    databases.finished(name)


@pytest.fixture(scope="session")
def redis_cluster_server(sluice_redis_cluster: RedisCluster) -> RedisCluster:
    """The session's Redis Cluster, started on first use: the testing plugin's, so a
    session that also runs app tests on a cluster starts one."""
    return sluice_redis_cluster


def _topology_config(topology: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The settings of ``topology``; a cluster's primaries flushed for this test."""
    if topology == "partitioned":
        return {"stream_partitions": PARTITIONS}
    if topology == "cluster":
        return cluster_settings(request.getfixturevalue("redis_cluster_server"))
    return {}


@pytest.fixture
def sluice_database_url(database_url: str | None) -> str:
    """The plugin's database for ``sluice_config``: this suite's (a copy of the migrated
    template, or SQLite), so the plugin's config follows the suite's ``store_kind``."""
    return database_url or ""


@pytest.fixture
def make_config(
    sluice_config: Callable[..., Config], topology: str, request: pytest.FixtureRequest
) -> Callable[..., Config]:
    """The plugin's ``sluice_config`` (this test's data dir, database and Redis, the quick
    timings) on this test's Redis topology, with the apps of ``@pytest.mark.apps(names)``
    if the test has it; keyword arguments override fields."""
    redis_settings = _topology_config(topology, request)
    marked = request.node.get_closest_marker("apps")
    apps = {"apps": marked.args[0]} if marked else {}

    def make(**overrides: Any) -> Config:
        return sluice_config(**{**apps, **redis_settings, **overrides})

    return make


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config()


@pytest.fixture
async def redis(
    redis_server: RedisServer, topology: str, request: pytest.FixtureRequest
) -> AsyncIterator[aioredis.Redis]:
    """A client of this test's Redis (of its cluster, on the ``cluster`` topology)."""
    if topology == "cluster":
        config: Config = request.getfixturevalue("config")
        client = redis_client(config)
    else:
        client = aioredis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def aiohttp_client(aiohttp_client: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """pytest-aiohttp's client; a sluice app is served as ``sluice api`` serves it."""

    async def client(app: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(app, web.Application) and CONFIG in app:
            app = ServedAsApi(app)
        return await aiohttp_client(app, *args, **kwargs)

    return client
