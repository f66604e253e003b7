"""Fixtures shared by every suite: a private Redis per test, a config factory."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis.configuration import set_hypothesis_home_dir

from sluice.config import Config, load_config
from sluice.redis_server import RedisServer

_hypothesis_home: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis (and schemathesis through it) keeps files under ./.hypothesis even
    # without an example database; keep them out of the work tree, for this run only.
    global _hypothesis_home
    _hypothesis_home = Path(tempfile.mkdtemp(prefix="sluice-hypothesis-"))
    set_hypothesis_home_dir(_hypothesis_home)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _hypothesis_home is not None:
        shutil.rmtree(_hypothesis_home, ignore_errors=True)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server child on a free loopback port, with AOF under tmp_path."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_config(tmp_path: Path, redis_server: RedisServer) -> Callable[..., Config]:
    """Config for this test's data dir and Redis; keyword arguments override fields."""

    def make(**overrides: Any) -> Config:
        values: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "redis_url": redis_server.url,
            "log_format": "json",
            "log_level": "warning",
            "stream_prefix": "sluice",
            "visitor_key": "test-visitor-key",
            "retry_base_ms": 50,
            "claim_idle_ms": 1000,
            "worker_block_ms": 200,
            "relay_poll_ms": 200,
        }
        values.update(overrides)
        return load_config({}, **values)

    return make


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()
