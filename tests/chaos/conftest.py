"""The chaos deployment: every sluice process kind as a real child process on one Redis.

Two ``sluice api`` replicas on free ports, the relay, one worker process per
handler group (stable consumer names, so a restarted worker drains its own
pending list), and two ``sluice scheduler`` replicas running the test's
``tick`` task every 2 s (tests/integration/scheduler_tasks.py). Mail goes to
``.eml`` files under ``<data dir>/mail``. Each child's log lines go to
``<tmp dir>/logs/<name>.log``, kept by pytest for the last runs.

On PostgreSQL every process also gets a data dir of its own, as if each ran
on a host of its own: they share only the database and Redis (docs/guides/several-hosts.md).

``CHAOS_SEED`` replays a run's fault plan (the seed is printed);
``CHAOS_OUTAGE_SECONDS`` sets the length of the Redis outage (default 12).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sluice.app.assembly import open_resources
from sluice.config import Config
from sluice.process.resources import Resources
from tests.chaos.cluster import Cluster


@pytest.fixture
async def resources(config: Config) -> AsyncIterator[Resources]:
    async with open_resources(config) as res:  # applies the migrations before any child runs
        yield res


@pytest.fixture
def cluster(config: Config, resources: Resources, tmp_path: Path) -> Iterator[Cluster]:
    logs = tmp_path / "logs"
    logs.mkdir()
    running = Cluster(config, logs)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def chaos_seed() -> int:
    """``CHAOS_SEED`` when set (to replay a run), else a fresh one."""
    raw = os.environ.get("CHAOS_SEED")
    return int(raw) if raw else secrets.randbelow(1_000_000)


@pytest.fixture
def outage_seconds() -> float:
    return float(os.environ.get("CHAOS_OUTAGE_SECONDS", "12"))
