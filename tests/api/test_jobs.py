"""Export jobs through the API: request, poll, download, owner-only, retention.

The job is run in process here (the runner the ``exports`` workers call), so
every status of the routes is reached deterministically; the integration tests
drive 50,000 visits through a real worker, also killed midway. Ranges,
conditional downloads and serving from another host: ``test_job_downloads.py``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.app.assembly import all_tasks
from sluice.builtin.links.events import ExportRequested, LinkVisited
from sluice.builtin.links.exports.retention import purge_finished
from sluice.builtin.links.exports.runner import run_export
from sluice.config import Config
from sluice.events import utcnow
from sluice.http import MAX_BODY
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events
from tests.api.job_helpers import (
    CODE,
    deps,
    job_body,
    request_export,
    setup_links,
    start,
    stored_bytes,
)
from tests.link_helpers import OTHER_TOKEN, bearer


async def test_an_export_answers_202_at_once_with_a_queued_job(
    client: Client, store: Store, config: Config
) -> None:
    await setup_links(store)
    response = await request_export(client)
    assert response.status == 202
    body = await response.json()
    assert set(body) == {"job_id", "status_url"}
    assert body["status_url"] == f"{config.base_url}/v1/jobs/{body['job_id']}"
    assert response.headers["Location"] == body["status_url"]
    # The job row and its event committed together, with the request's trace id.
    [(event, trace_id)] = [
        (e, t) for e, t in await stored_events(store) if isinstance(e, ExportRequested)
    ]
    assert (event.job_id, event.code, event.owner_id) == (body["job_id"], CODE, "user-owner")
    assert trace_id == event.trace_id == response.headers["X-Trace-Id"]

    job = await job_body(client, body["job_id"])
    assert job.status == 200
    shown = await job.json()
    created_at = datetime.fromisoformat(shown.pop("created_at").replace("Z", "+00:00"))
    assert abs((utcnow() - created_at).total_seconds()) < 5
    assert shown == {
        "id": body["job_id"],
        "kind": "export",
        "status": "queued",
        "progress": 0,
        "finished_at": None,
        "result_url": None,
        "error": None,
    }


async def test_a_second_request_while_one_is_queued_returns_the_same_job(
    client: Client, store: Store, config: Config
) -> None:
    await setup_links(store)
    first, second = await start(client), await start(client)
    assert first == second
    events = [e for e, _ in await stored_events(store) if isinstance(e, ExportRequested)]
    assert len(events) == 1
    # Once it finished, a new request is a new job (a new snapshot of the history).
    await run_export(first["job_id"], deps(client, store, config))
    third = await start(client)
    assert third["job_id"] != first["job_id"]


async def test_another_users_link_and_an_unknown_link_are_404_and_write_nothing(
    client: Client, store: Store
) -> None:
    await setup_links(store)
    before = len(await stored_events(store))
    await problem(await request_export(client, "theirs"), 404)
    await problem(await request_export(client, "nosuchlink"), 404)
    assert len(await stored_events(store)) == before
    assert await store.fetchall("SELECT id FROM jobs") == []


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_oversized_body_is_413_although_the_route_ignores_its_body(
    client: Client, store: Store, streamed: bool
) -> None:
    await setup_links(store)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(MAX_BODY // 4096 + 1):
            yield b"x" * 4096

    body = chunks() if streamed else b"x" * (MAX_BODY + 1)
    response = await client.post(f"/v1/links/{CODE}/exports", data=body, headers=bearer())
    await problem(response, 413)
    assert await store.fetchall("SELECT id FROM jobs") == []
    assert not [e for e, _ in await stored_events(store) if isinstance(e, ExportRequested)]


async def test_every_job_route_needs_a_token(client: Client, store: Store) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]
    for response in (
        await client.post(f"/v1/links/{CODE}/exports"),
        await client.get(f"/v1/jobs/{job_id}"),
        await client.get(f"/v1/jobs/{job_id}/result"),
    ):
        await problem(response, 401)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_jobs_are_404_for_another_user_and_for_unknown_ids(
    client: Client, store: Store
) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]
    await problem(await job_body(client, job_id, OTHER_TOKEN), 404)
    await problem(await client.get(f"/v1/jobs/{job_id}/result", headers=bearer(OTHER_TOKEN)), 404)
    await problem(await job_body(client, "01900000-0000-7000-8000-000000000000"), 404)


async def test_the_result_is_409_before_the_job_succeeded(client: Client, store: Store) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]
    body = await problem(await client.get(f"/v1/jobs/{job_id}/result", headers=bearer()), 409)
    assert "queued" in body["detail"]


async def test_a_finished_export_serves_its_csv_until_retention_removes_it(
    client: Client, store: Store, config: Config
) -> None:
    await setup_links(store)
    async with store.transaction() as tx:
        await tx.append(
            LinkVisited(
                code=CODE,
                visitor="v1",
                referrer_host="news.example.com",
                browser="Firefox",
                country="DE",
                os="linux",
                device="desktop",
            ),
            LinkVisited(code="theirs", visitor="v2"),
            LinkVisited(code=CODE, visitor="v3", browser="=cmd()", is_bot=True),
        )
    job_id = (await start(client))["job_id"]
    await run_export(job_id, deps(client, store, config))

    job = await (await job_body(client, job_id)).json()
    assert (job["status"], job["progress"], job["error"]) == ("succeeded", 100, None)
    assert job["finished_at"] is not None
    assert job["result_url"] == f"{config.base_url}/v1/jobs/{job_id}/result"
    response = await client.get(f"/v1/jobs/{job_id}/result", headers=bearer())
    assert response.status == 200
    assert response.content_type == "text/csv"
    disposition = response.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="export1-visits-')
    rows = list(csv.reader(io.StringIO(await response.text())))
    assert rows[0] == [
        "visited_at",
        "visitor",
        "referrer_host",
        "browser",
        "is_bot",
        "country",
        "os",
        "device",
    ]
    assert [row[1:] for row in rows[1:]] == [
        ["v1", "news.example.com", "Firefox", "false", "DE", "linux", "desktop"],
        ["v3", "", "'=cmd()", "true", "", "", ""],  # a formula is defused for spreadsheets
    ]
    assert all(row[0].endswith("Z") for row in rows[1:])

    # The CSV is in the database, not in the data dir.
    assert await stored_bytes(store, job_id) == len(await response.read())
    assert not (config.data_dir / "exports").exists()

    # Retention: the bytes go, the job stays and its result answers 410.
    assert await purge_finished(store, utcnow(), 3600) == 0
    assert await purge_finished(store, utcnow() + timedelta(hours=2), 3600) == 1
    assert await stored_bytes(store, job_id) == 0
    body = await problem(await client.get(f"/v1/jobs/{job_id}/result", headers=bearer()), 410)
    assert "retention" in body["detail"]
    job = await (await job_body(client, job_id)).json()
    assert (job["status"], job["result_url"]) == ("succeeded", None)


async def test_an_export_of_a_link_that_is_gone_fails_with_an_error(
    client: Client, store: Store, config: Config
) -> None:
    await setup_links(store)
    job_id = (await start(client))["job_id"]
    async with store.transaction() as tx:  # links are never deleted; this one was, by hand
        await tx.execute("DELETE FROM links WHERE code = ?", (CODE,))
    await run_export(job_id, deps(client, store, config))

    job = await (await job_body(client, job_id)).json()
    assert job["status"] == "failed"
    assert "does not exist" in job["error"]
    assert job["finished_at"] is not None and job["result_url"] is None
    body = await problem(await client.get(f"/v1/jobs/{job_id}/result", headers=bearer()), 409)
    assert "failed" in body["detail"]


def test_the_purge_task_runs_every_15_minutes_by_default(make_config: Any) -> None:
    moment = datetime(2026, 3, 1, 12, 7, 30, tzinfo=UTC)
    task = all_tasks(make_config())["purge-exports"]
    assert task.schedule.next_after(moment) == datetime(2026, 3, 1, 12, 15, tzinfo=UTC)
    hourly = all_tasks(make_config(purge_exports_cron="0 0 * * * *"))["purge-exports"]
    assert hourly.schedule.next_after(moment) == datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
