"""Admin task routes: list, manual runs under the scheduler's lock, run records; snapshots."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.app.assembly import all_tasks, create_app, open_resources
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.events import TaskRunFinished
from sluice.http.app_keys import STORE
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.runner import Runner
from sluice.scheduler.task_spec import Task, TaskContext
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, problem, stored_events
from tests.sqlite_helpers import assert_writable, write_locked

ADMIN = {"Authorization": "Bearer task-admin-token-0123456789abcdef"}
RELEASE = asyncio.Event()


async def hold(ctx: TaskContext) -> None:
    """Runs until the test sets RELEASE."""
    await RELEASE.wait()


async def fails(ctx: TaskContext) -> None:
    raise ValueError("bad row 17")


def tasks(config: Config) -> list[Task]:
    """Loaded by the app through SLUICE_EXTRA_TASKS."""
    never = parse_cron("0 0 0 1 1 *", "UTC")
    return [Task("hold", never, hold), Task("fails", never, fails)]


@pytest.fixture
def admin_config(make_config: Callable[..., Config]) -> Config:
    return make_config(
        admin_token="task-admin-token-0123456789abcdef",
        extra_tasks="tests.api.test_tasks_api:tasks",
    )


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, admin_config: Config) -> AsyncIterator[Client]:
    global RELEASE
    RELEASE = asyncio.Event()  # an Event binds to the loop of its first waiter: one per test
    client = await aiohttp_client(create_app(admin_config))
    yield client
    RELEASE.set()


def store_of(client: Client) -> Store:
    assert client.app is not None
    return client.app[STORE]


async def runs_of(client: Client, task: str, **query: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/admin/tasks/{task}/runs", params=query, headers=ADMIN)
    assert response.status == 200, await response.text()
    body: list[dict[str, Any]] = await response.json()
    return body


async def finished(client: Client, task: str, run_id: str) -> dict[str, Any]:
    async def done() -> bool:
        return any(
            r["id"] == run_id and r["status"] != "running" for r in await runs_of(client, task)
        )

    await wait_for(done, timeout=10)
    return next(r for r in await runs_of(client, task) if r["id"] == run_id)


async def test_tasks_are_listed_with_their_schedule_and_next_run(admin: Client) -> None:
    response = await admin.get("/v1/admin/tasks", headers=ADMIN)
    assert response.status == 200
    listed = {t["name"]: t for t in await response.json()}
    assert set(listed) >= {
        "refill-code-pool",
        "snapshot-leaderboard",
        "trim-streams",
        "reap-consumers",
    }
    refill = listed["refill-code-pool"]
    assert (refill["cron"], refill["timezone"]) == ("0 0 4 * * *", "Asia/Shanghai")
    next_run = datetime.fromisoformat(refill["next_run"])
    # 04:00 in Shanghai (UTC+8, no DST) is 20:00 UTC, within the next day.
    assert (next_run.hour, next_run.minute, next_run.second) == (20, 0, 0)
    assert timedelta(0) < next_run - datetime.now(UTC) <= timedelta(days=1)
    assert refill["last_run"] is None


async def test_a_manual_run_answers_202_and_leaves_a_run_record(admin: Client) -> None:
    response = await admin.post("/v1/admin/tasks/trim-streams/runs", headers=ADMIN)
    assert response.status == 202, await response.text()
    run_id = (await response.json())["run_id"]
    record = await finished(admin, "trim-streams", run_id)
    assert record["status"] == "succeeded" and record["trigger"] == "manual"
    assert record["error"] is None and record["finished_at"] >= record["started_at"]
    listed = {
        t["name"]: t for t in await (await admin.get("/v1/admin/tasks", headers=ADMIN)).json()
    }
    assert listed["trim-streams"]["last_run"]["id"] == run_id
    events = [e for e, _ in await stored_events(store_of(admin)) if isinstance(e, TaskRunFinished)]
    assert [(e.run_id, e.status, e.trigger) for e in events] == [(run_id, "succeeded", "manual")]


async def test_a_failing_task_shows_its_error_on_the_record(admin: Client) -> None:
    response = await admin.post("/v1/admin/tasks/fails/runs", headers=ADMIN)
    record = await finished(admin, "fails", (await response.json())["run_id"])
    assert record["status"] == "failed"
    assert "ValueError: bad row 17" in record["error"]


async def test_a_manual_run_while_a_run_is_in_progress_anywhere_gets_409(
    admin: Client, admin_config: Config
) -> None:
    task = all_tasks(admin_config)["hold"]
    # A scheduled run of the task, in another "replica" (its own connections).
    async with open_resources(admin_config) as replica:
        runner = Runner(replica, holder="scheduler-replica")
        scheduled = await runner.begin(task, "cron", datetime.now(UTC).replace(microsecond=0))
        execution = asyncio.create_task(runner.execute(scheduled))
        body = await problem(await admin.post("/v1/admin/tasks/hold/runs", headers=ADMIN), 409)
        assert "in progress" in body["detail"]
        RELEASE.set()
        assert (await execution).status == "succeeded"
    RELEASE.clear()
    first = await admin.post("/v1/admin/tasks/hold/runs", headers=ADMIN)
    assert first.status == 202
    await problem(await admin.post("/v1/admin/tasks/hold/runs", headers=ADMIN), 409)
    RELEASE.set()
    await finished(admin, "hold", (await first.json())["run_id"])

    # The run records its outcome, then gives its lock back: a run asked in between is
    # still refused, one asked right after is taken.
    async def taken_again() -> bool:
        again = await admin.post("/v1/admin/tasks/hold/runs", headers=ADMIN)
        assert again.status in (202, 409), await again.text()
        return again.status == 202

    await wait_for(taken_again, timeout=10)
    records = await runs_of(admin, "hold", limit="2")
    assert [r["trigger"] for r in records] == ["manual", "manual"]
    assert len(await runs_of(admin, "hold")) == 3


async def test_task_routes_check_the_token_the_name_and_the_limit(admin: Client) -> None:
    await problem(await admin.get("/v1/admin/tasks"), 401)
    await problem(await admin.post("/v1/admin/tasks/hold/runs"), 401)
    await problem(await admin.post("/v1/admin/tasks/nope/runs", headers=ADMIN), 404)
    await problem(await admin.get("/v1/admin/tasks/nope/runs", headers=ADMIN), 404)
    for bad in ("0", "x", "100000"):
        body = await problem(
            await admin.get("/v1/admin/tasks/hold/runs", params={"limit": bad}, headers=ADMIN), 422
        )
        assert body["errors"][0]["field"] == "limit"


async def test_the_leaderboard_snapshot_serves_yesterdays_top_articles(admin: Client) -> None:
    store = store_of(admin)
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date()
    async with store.transaction() as tx:
        await tx.executemany(
            "INSERT INTO article_view_periods (period, start, article_id, views)"
            " VALUES (?, ?, ?, ?)",
            [("day", yesterday.isoformat(), f"a{i}", i) for i in range(1, 131)]
            + [("day", (yesterday - timedelta(days=1)).isoformat(), "older", 999)],
        )
    await problem(await admin.get(f"/v1/articles/top/{yesterday}"), 404)
    response = await admin.post("/v1/admin/tasks/snapshot-leaderboard/runs", headers=ADMIN)
    record = await finished(admin, "snapshot-leaderboard", (await response.json())["run_id"])
    assert record["status"] == "succeeded"
    snapshot = await admin.get(f"/v1/articles/top/{yesterday}")
    assert snapshot.status == 200
    body = await snapshot.json()
    assert body["date"] == yesterday.isoformat()
    assert [i["article_id"] for i in body["items"]] == [f"a{i}" for i in range(130, 30, -1)]
    assert body["items"][0]["views"] == 130
    await problem(await admin.get(f"/v1/articles/top/{yesterday - timedelta(days=1)}"), 404)
    for bad in ("2026-13-01", "yesterday", "2026-1-1"):
        body = await problem(await admin.get(f"/v1/articles/top/{bad}"), 422)
        assert body["errors"][0]["field"] == "date"


@pytest.mark.stores("sqlite")  # SQLite's file lock; PostgreSQL outages: test_postgres_outage.py
async def test_a_manual_run_while_the_database_is_locked_is_a_503_and_leaves_it_usable(
    admin: Client, admin_config: Config
) -> None:
    with write_locked(admin_config.sqlite_path):  # for longer than the route waits
        response = await admin.post("/v1/admin/tasks/hold/runs", headers=ADMIN)
        answer = await problem(response, 503)
        assert "Redis or the database" in answer["detail"]
    # The interrupted run gave the write lock back: the next run starts and records itself.
    response = await admin.post("/v1/admin/tasks/fails/runs", headers=ADMIN)
    assert response.status == 202, await response.text()
    assert_writable(admin_config.sqlite_path)  # and another process can write again
