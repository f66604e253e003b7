"""Integration fixtures: real store, real Redis, in-process relay and workers."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from sluice.app.assembly import open_store
from sluice.app.testing import Child, wait_answering
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from sluice.store import Store
from tests.integration.engine_fixtures import (  # noqa: F401
    resources,
    running,
    start_relay,
    start_runners,
    start_worker,
)
from tests.span_capture import spans  # noqa: F401 (a fixture)


@pytest.fixture
async def store(config: Config) -> AsyncIterator[Store]:
    """The test's store alone (no Redis client), migrated."""
    opened = await open_store(config)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def spawn(config: Config, sluice_spawn: Callable[..., Child]) -> Callable[..., Child]:
    """``spawn(*command, log=None, **env)``: a ``sluice`` child process of the test's
    deployment (the app testing plugin's ``sluice_spawn``), killed after the test."""
    return functools.partial(sluice_spawn, config)


@pytest.fixture
async def otlp_receiver() -> AsyncIterator[tuple[Any, int]]:
    """``(receiver, port)``: an OTLP/HTTP trace receiver on a free port
    (tests/otlp_receiver.py); the test is skipped without the ``otel`` extra."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from tests.otlp_receiver import receiving

    async with receiving() as found:
        yield found


@pytest.fixture
async def replicas(spawn: Callable[..., Child]) -> AsyncIterator[list[str]]:
    """Two API processes on their own ports, answering."""
    ports = [free_port(), free_port()]
    for port in ports:
        spawn("api", SLUICE_PORT=str(port))
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    await wait_answering(urls)
    yield urls
