"""Cancelling exports for real: a worker process in the middle of a long export stops
within 2 s of ``DELETE /v1/jobs/{id}``, its partial CSV gone, its entry acked with no
retry and no dead letter; a job cancelled while queued never runs when a worker
starts later."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestClient

from sluice.app.assembly import create_app
from sluice.app.testing import Child, wait_for
from sluice.builtin.links.events import ExportRequested
from sluice.builtin.links.exports import jobs
from sluice.builtin.links.keys import LinksKeys
from sluice.config import Config
from sluice.events import decode
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.integration.export_helpers import CODE, all_published, seed, small_export
from tests.link_helpers import bearer

pytestmark = pytest.mark.topologies("single", "cluster")

GROUP = "exports"
Client = TestClient[web.Request, web.Application]


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    # The job's lock lives SLUICE_CLAIM_IDLE_MS: 1 s (the tests' default) can lapse on a
    # loaded machine, and a lost lock is a retry, which is not what is tested here.
    return make_config(claim_idle_ms=5_000)


@pytest.fixture
async def api(aiohttp_client: Callable[..., Awaitable[Client]], config: Config) -> Client:
    return await aiohttp_client(create_app(config))


async def stored_bytes(resources: Resources, job_id: str) -> int:
    row = await resources.store.fetchone(
        "SELECT COALESCE(SUM(length(data)), 0) FROM export_chunks WHERE job_id = ?", (job_id,)
    )
    return int(row[0]) if row else 0


async def export_event(resources: Resources, job_id: str) -> str:
    """The event id of the job's ExportRequested."""
    [event_id] = [
        stored.event_id
        for stored in await resources.store.events_after(0, 100, types=["ExportRequested"])
        if isinstance(event := decode(stored.payload), ExportRequested) and event.job_id == job_id
    ]
    return event_id


async def outcomes(resources: Resources, event_id: str) -> list[str]:
    """The recorded deliveries of an event to the exports group, in order."""
    rows = await resources.store.fetchall(
        "SELECT outcome FROM deliveries WHERE event_id = ? AND group_name = ? ORDER BY id",
        (event_id, GROUP),
    )
    return [str(row[0]) for row in rows]


async def pending_entries(resources: Resources) -> int:
    """The exports group's entries delivered and not yet acked, in every partition."""
    keys = resources.keys
    total = 0
    for partition in keys.numbers:
        pending: Any = await resources.redis.xpending(keys.stream("exports", partition), GROUP)
        total += int(pending["pending"])
    return total


async def nothing_left_over(resources: Resources) -> None:
    """No dead letter, no retry waiting or queued, nothing pending, in any partition."""
    redis: aioredis.Redis = resources.redis
    keys = resources.keys
    for partition in keys.numbers:
        assert await redis.xlen(keys.dead(GROUP, partition)) == 0
        assert await redis.zcard(keys.delayed(GROUP, partition)) == 0
        assert await redis.xlen(keys.retry(GROUP, partition)) == 0
        pending: Any = await redis.xpending(keys.stream("exports", partition), GROUP)
        assert pending["pending"] == 0


async def test_a_running_export_in_a_worker_process_stops_within_2s_of_its_cancel(
    resources: Resources,
    api: Client,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    store = resources.store
    await seed(store)  # 55,000 visits in the history
    response = await api.post(f"/v1/links/{CODE}/exports", headers=bearer())
    assert response.status == 202, await response.text()
    job_id = (await response.json())["job_id"]
    start_relay()
    await all_published(store)
    # Small windows: the export would take far longer than the test waits.
    spawn("worker", GROUP, "--consumer", "c1", SLUICE_EXPORT_BATCH="20")

    async def under_way() -> bool:
        job = await jobs.get_job(store, job_id)
        return job is not None and job.status == "running" and job.cursor_seq > 0

    await wait_for(under_way, timeout=30, interval=0.01)
    assert await stored_bytes(resources, job_id) > 0
    lock = LinksKeys(resources.keys.prefix).export_lock(job_id)
    assert await resources.redis.exists(lock) == 1

    event_id = await export_event(resources, job_id)
    asked = time.monotonic()
    response = await api.delete(f"/v1/jobs/{job_id}", headers=bearer())
    assert response.status == 202, await response.text()
    assert (await response.json())["status"] == "cancelled"

    async def stopped() -> bool:
        # The runner let go of the job and the runtime settled its entry as cancelled:
        # the outcome recorded, then the entry acked (in that order: a crash between the
        # two delivers it again), so the wait is for both.
        released = not await resources.redis.exists(lock)
        if not released or await outcomes(resources, event_id) != ["cancelled"]:
            return False
        return await pending_entries(resources) == 0

    await wait_for(stopped, timeout=2, interval=0.02, exact=True)
    assert time.monotonic() - asked < 2
    job = await jobs.get_job(store, job_id)
    assert job is not None and (job.status, job.attempt) == ("cancelled", 1)
    assert job.cursor_seq < job.snapshot_seq, "the export finished first: nothing tested"
    assert await stored_bytes(resources, job_id) == 0
    await nothing_left_over(resources)
    shown = await (await api.get(f"/v1/jobs/{job_id}", headers=bearer())).json()
    assert (shown["status"], shown["result_url"]) == ("cancelled", None)


async def test_a_job_cancelled_while_queued_never_runs_when_a_worker_starts(
    resources: Resources,
    api: Client,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., object],
) -> None:
    store = resources.store
    job = await small_export(store)
    response = await api.delete(f"/v1/jobs/{job.id}", headers=bearer())
    assert response.status == 202, await response.text()

    event_id = await export_event(resources, job.id)
    start_relay()
    start_worker(GROUP)

    async def settled() -> bool:
        return await outcomes(resources, event_id) == ["cancelled"]

    await wait_for(settled)
    after = await jobs.get_job(store, job.id)
    assert after is not None
    assert (after.status, after.attempt, after.started_at, after.progress) == (
        "cancelled",
        0,
        None,
        0,
    )
    assert await stored_bytes(resources, job.id) == 0
    await nothing_left_over(resources)
