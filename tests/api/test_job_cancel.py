"""Cancelling export jobs through the API: ``DELETE /v1/jobs/{id}`` by the owner or the
admin, and what a worker does with a cancelled job's event.

The runner is called in process here, as the ``exports`` workers call it; a real
worker process stopped in the middle of a long export is in
``tests/integration/test_export_cancel.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.exports import jobs, visits
from sluice.builtin.links.exports.runner import run_export
from sluice.config import Config
from sluice.process.resources import keys_for
from sluice.store import Store
from sluice.streams.messages import Cancelled
from tests.api.helpers import Client, problem
from tests.api.job_helpers import CODE, deps, job_body, setup_links, start, stored_bytes
from tests.link_helpers import OTHER_TOKEN, bearer

TOKEN = "cancel-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
UNKNOWN_JOB = "01900000-0000-7000-8000-000000000000"


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=TOKEN)


async def cancel(client: Client, job_id: str, headers: dict[str, str] | None = None) -> Any:
    return await client.delete(
        f"/v1/jobs/{job_id}", headers=bearer() if headers is None else headers
    )


async def test_the_owner_cancels_a_queued_job_and_no_worker_ever_runs_it(
    client: Client, store: Store, config: Config, redis: aioredis.Redis
) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]

    response = await cancel(client, job_id)
    assert response.status == 202, await response.text()
    body = await response.json()
    assert (body["id"], body["status"], body["result_url"]) == (job_id, "cancelled", None)
    assert body["finished_at"] is not None
    shown = await (await job_body(client, job_id)).json()
    assert shown["status"] == "cancelled"
    # The signal for a runner on any host.
    assert await redis.exists(keys_for(config).cancel("export", job_id)) == 1

    # Its event reaches a worker later: nothing runs, the outcome is "cancelled".
    with pytest.raises(Cancelled):
        await run_export(job_id, deps(client, store, config))
    job = await jobs.get_job(store, job_id)
    assert job is not None and (job.status, job.attempt, job.started_at) == ("cancelled", 0, None)
    assert await stored_bytes(store, job_id) == 0
    assert await redis.exists(keys_for(config).cancel("export", job_id)) == 0

    # It no longer holds the link's place: a new request is a new job.
    assert (await start(client))["job_id"] != job_id


async def test_a_running_job_cancelled_loses_its_partial_result_and_writes_no_more(
    client: Client, store: Store, config: Config
) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]
    # An attempt in progress on some worker: running, its header stored.
    running = await jobs.begin_attempt(store, job_id, visits.header())
    assert running is not None and running.status == "running"
    assert await stored_bytes(store, job_id) > 0

    response = await cancel(client, job_id)
    assert response.status == 202, await response.text()
    assert await stored_bytes(store, job_id) == 0
    # That attempt's next checkpoint and its outcome change nothing.
    data = b"2026-03-01T00:00:00Z,v,,,false\r\n"
    assert not await jobs.checkpoint(
        store, running, cursor_seq=1, rows=1, progress=50, at=running.cursor_bytes, data=data
    )
    assert not await jobs.succeed(store, running)
    assert not await jobs.fail(store, running, "boom")
    assert await stored_bytes(store, job_id) == 0
    shown = await (await job_body(client, job_id)).json()
    assert shown["status"] == "cancelled" and shown["error"] is None
    body = await problem(await client.get(f"/v1/jobs/{job_id}/result", headers=bearer()), 409)
    assert "cancelled" in body["detail"]


async def test_the_admin_token_cancels_anyones_job(client: Client, store: Store) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]
    response = await cancel(client, job_id, ADMIN)
    assert response.status == 202, await response.text()
    assert (await response.json())["status"] == "cancelled"
    await problem(await cancel(client, UNKNOWN_JOB, ADMIN), 404)


async def test_a_finished_job_is_409_and_stays_as_it_was(
    client: Client, store: Store, config: Config
) -> None:
    await setup_links(store)
    async with store.transaction() as tx:
        await tx.append(LinkVisited(code=CODE, visitor="v1"))
    done = (await start(client))["job_id"]
    await run_export(done, deps(client, store, config))
    body = await problem(await cancel(client, done), 409)
    assert "succeeded" in body["detail"]
    assert (await (await job_body(client, done)).json())["status"] == "succeeded"
    assert await stored_bytes(store, done) > 0

    cancelled = (await start(client))["job_id"]
    assert (await cancel(client, cancelled)).status == 202
    body = await problem(await cancel(client, cancelled, ADMIN), 409)
    assert "cancelled" in body["detail"]


async def test_another_users_job_and_unknown_ids_are_404_and_bad_tokens_401(
    client: Client, store: Store
) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]
    await problem(await cancel(client, job_id, bearer(OTHER_TOKEN)), 404)
    await problem(await cancel(client, UNKNOWN_JOB), 404)
    for headers in ({}, {"Authorization": "Bearer not-a-token-at-all"}, {"Authorization": "x"}):
        response = await cancel(client, job_id, headers)
        await problem(response, 401)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    # None of them touched it.
    assert (await (await job_body(client, job_id)).json())["status"] == "queued"
