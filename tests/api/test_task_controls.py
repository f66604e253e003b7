"""Scheduling policies through the admin API (docs/guides/tasks.md): policies listed, pause and
resume, run filters, cancel of a running run, backfill; and their errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.http.task_controls import BACKFILL_MAX
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.runner import CANCELLED
from sluice.scheduler.task_spec import Task, TaskContext
from tests.api.helpers import AiohttpClient, Client, problem

TOKEN = "controls-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
RAN: list[datetime] = []


async def forever(ctx: TaskContext) -> None:
    await asyncio.sleep(3600)


async def minutely(ctx: TaskContext) -> None:
    RAN.append(ctx.run.scheduled_for)


def tasks(config: Config) -> list[Task]:
    """Loaded by the app through SLUICE_EXTRA_TASKS."""
    never = parse_cron("0 0 0 1 1 *", "UTC")
    return [
        Task("forever", never, forever),
        Task("minutely", parse_cron("0 * * * * *", "UTC"), minutely),
    ]


@pytest.fixture
async def admin(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> AsyncIterator[Client]:
    RAN.clear()
    config = make_config(
        admin_token=TOKEN,
        extra_tasks="tests.api.test_task_controls:tasks",
        task_overlaps={"minutely": "allow_all"},
        task_jitter_seconds={"minutely": 2.5},
        group_timeouts={"forever": 600.0},
    )
    yield await aiohttp_client(create_app(config))


async def listed(client: Client) -> dict[str, dict[str, Any]]:
    response = await client.get("/v1/admin/tasks", headers=ADMIN)
    assert response.status == 200
    return {t["name"]: t for t in await response.json()}


async def runs_of(client: Client, task: str, **query: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/admin/tasks/{task}/runs", params=query, headers=ADMIN)
    assert response.status == 200, await response.text()
    body: list[dict[str, Any]] = await response.json()
    return body


async def test_each_task_is_listed_with_its_policy(admin: Client) -> None:
    tasks = await listed(admin)
    assert tasks["minutely"]["policy"] == {
        "overlap": "allow_all",
        "catchup_seconds": 0.0,
        "jitter_seconds": 2.5,
        "timeout_seconds": None,
    }
    assert tasks["forever"]["policy"]["timeout_seconds"] == 600.0
    assert tasks["refill-code-pool"]["policy"]["overlap"] == "skip"
    assert tasks["forever"]["paused"] is False and tasks["forever"]["paused_at"] is None


async def test_pause_and_resume_answer_204_and_show_in_the_list(admin: Client) -> None:
    for _ in range(2):  # idempotent
        assert (await admin.post("/v1/admin/tasks/minutely/pause", headers=ADMIN)).status == 204
    paused = (await listed(admin))["minutely"]
    assert paused["paused"] is True
    assert datetime.fromisoformat(paused["paused_at"]) <= datetime.now(UTC)
    assert (await listed(admin))["forever"]["paused"] is False
    assert (await admin.post("/v1/admin/tasks/minutely/resume", headers=ADMIN)).status == 204
    assert (await listed(admin))["minutely"]["paused"] is False
    await problem(await admin.post("/v1/admin/tasks/nope/pause", headers=ADMIN), 404)
    await problem(await admin.post("/v1/admin/tasks/nope/resume", headers=ADMIN), 404)
    await problem(await admin.post("/v1/admin/tasks/minutely/pause"), 401)


async def test_a_running_run_is_cancelled_and_recorded_so(admin: Client) -> None:
    started = await admin.post("/v1/admin/tasks/forever/runs", headers=ADMIN)
    run_id = (await started.json())["run_id"]
    path = f"/v1/admin/tasks/forever/runs/{run_id}/cancel"
    response = await admin.post(path, headers=ADMIN)
    assert response.status == 202
    assert (await response.json())["id"] == run_id

    async def cancelled() -> bool:
        return [r["status"] for r in await runs_of(admin, "forever")] == ["cancelled"]

    await wait_for(cancelled, timeout=2, exact=True)
    record = (await runs_of(admin, "forever", status="cancelled"))[0]
    assert record["error"] == CANCELLED and record["finished_at"]
    body = await problem(await admin.post(path, headers=ADMIN), 409)
    assert "cancelled" in body["detail"]

    # Its lock goes back right after the record is written: a new manual run starts.
    async def starts_again() -> bool:
        return (await admin.post("/v1/admin/tasks/forever/runs", headers=ADMIN)).status == 202

    await wait_for(starts_again, timeout=2, exact=True)
    unknown = "/v1/admin/tasks/forever/runs/01a00000-0000-7000-8000-000000000000/cancel"
    await problem(await admin.post(unknown, headers=ADMIN), 404)
    other_task = f"/v1/admin/tasks/minutely/runs/{run_id}/cancel"
    await problem(await admin.post(other_task, headers=ADMIN), 404)


async def test_backfill_runs_each_past_occurrence_once(admin: Client) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    start, end = now - timedelta(minutes=5), now - timedelta(minutes=1)
    body = {"from": start.isoformat(), "to": end.isoformat()}
    response = await admin.post("/v1/admin/tasks/minutely/backfill", json=body, headers=ADMIN)
    assert response.status == 202, await response.text()
    answer = await response.json()
    assert answer["occurrences"] == 5
    assert datetime.fromisoformat(answer["first"]) == start

    async def five_ran() -> bool:
        return len(await runs_of(admin, "minutely", status="succeeded")) == 5

    await wait_for(five_ran, timeout=10)
    expected = [start + timedelta(minutes=i) for i in range(5)]
    assert expected == RAN  # once each, oldest first
    records = await runs_of(admin, "minutely", trigger="backfill")
    assert len(records) == 5 and await runs_of(admin, "minutely", trigger="cron") == []

    # A wider range again: only the occurrences not run yet run.
    wider = {"from": (start - timedelta(minutes=2)).isoformat(), "to": end.isoformat()}
    response = await admin.post("/v1/admin/tasks/minutely/backfill", json=wider, headers=ADMIN)
    assert (await response.json())["occurrences"] == 7

    async def seven_ran() -> bool:
        return len(await runs_of(admin, "minutely", status="succeeded")) == 7

    await wait_for(seven_ran, timeout=10)
    assert sorted(RAN) == [start + timedelta(minutes=i) for i in range(-2, 5)]
    assert len(RAN) == 7


async def test_backfill_refuses_bad_ranges(admin: Client) -> None:
    now = datetime.now(UTC)
    path = "/v1/admin/tasks/minutely/backfill"

    async def refused(body: dict[str, Any], status: int = 422) -> dict[str, Any]:
        return await problem(await admin.post(path, json=body, headers=ADMIN), status)

    too_many = now - timedelta(minutes=BACKFILL_MAX + 5)
    body = await refused({"from": too_many.isoformat(), "to": now.isoformat()})
    assert str(BACKFILL_MAX) in body["detail"]
    await refused({"from": now.isoformat(), "to": (now - timedelta(hours=1)).isoformat()})
    await refused({"from": now.isoformat(), "to": (now + timedelta(hours=1)).isoformat()})
    await refused({"from": "2026-01-01T00:00:00", "to": now.isoformat()})
    await refused({"from": "0001-01-01T00:00:00Z", "to": now.isoformat()})
    await refused({"from": "yesterday", "to": now.isoformat()}, 400)
    await refused({"to": now.isoformat()}, 400)
    good = {"from": (now - timedelta(minutes=5)).isoformat(), "to": now.isoformat()}
    await problem(await admin.post("/v1/admin/tasks/nope/backfill", json=good, headers=ADMIN), 404)
    assert RAN == []


async def test_run_records_filter_by_status_and_trigger(admin: Client) -> None:
    started = await admin.post("/v1/admin/tasks/forever/runs", headers=ADMIN)
    run_id = (await started.json())["run_id"]
    assert [r["id"] for r in await runs_of(admin, "forever", status="running")] == [run_id]
    assert await runs_of(admin, "forever", status="succeeded") == []
    assert len(await runs_of(admin, "forever", trigger="manual", status="running")) == 1
    assert await runs_of(admin, "forever", trigger="backfill") == []
    for query in ({"status": "done"}, {"trigger": "timer"}, {"status": ""}):
        response = await admin.get("/v1/admin/tasks/forever/runs", params=query, headers=ADMIN)
        body = await problem(response, 422)
        assert body["errors"][0]["field"] in query
    cancel = f"/v1/admin/tasks/forever/runs/{run_id}/cancel"
    assert (await admin.post(cancel, headers=ADMIN)).status == 202
