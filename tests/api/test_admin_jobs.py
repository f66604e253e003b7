"""``GET /v1/admin/jobs``: every user's jobs for the operator (the /admin page's Jobs
table, whose Cancel buttons call ``DELETE /v1/jobs/{id}``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sluice.builtin.links.exports import jobs, visits
from sluice.config import Config
from sluice.store import Store
from tests.api.helpers import Client, problem
from tests.api.job_helpers import request_export, setup_links
from tests.link_helpers import OTHER, OTHER_TOKEN, add_link, bearer

TOKEN = "jobs-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=TOKEN)


async def listed(client: Client, query: str = "") -> list[dict[str, Any]]:
    response = await client.get(f"/v1/admin/jobs{query}", headers=ADMIN)
    assert response.status == 200, await response.text()
    body: list[dict[str, Any]] = await response.json()
    return body


async def test_the_admin_lists_every_users_jobs_newest_first_and_by_status(
    client: Client, store: Store
) -> None:
    await setup_links(store)
    await add_link(store, "theirs2", "https://example.org/", owner=OTHER)
    started = []
    for code, token in (("export1", None), ("theirs", OTHER_TOKEN), ("theirs2", OTHER_TOKEN)):
        response = await request_export(client, code, token)
        assert response.status == 202, await response.text()
        started.append((await response.json())["job_id"])
    first, second, third = started
    assert await jobs.begin_attempt(store, second, visits.header()) is not None
    await client.delete(f"/v1/jobs/{third}", headers=ADMIN)

    everything = await listed(client)
    assert [j["id"] for j in everything] == [third, second, first]
    assert [j["status"] for j in everything] == ["cancelled", "running", "queued"]
    assert {(j["code"], j["owner_id"]) for j in everything} >= {("theirs", OTHER)}
    assert set(everything[0]) >= {"kind", "progress", "created_at", "finished_at", "trace_id"}
    assert [j["id"] for j in await listed(client, "?status=queued")] == [first]
    assert [j["id"] for j in await listed(client, "?status=running")] == [second]
    assert [j["id"] for j in await listed(client, "?status=cancelled")] == [third]
    assert await listed(client, "?status=succeeded") == []
    assert len(await listed(client)) == 3  # no status: every status


async def test_a_bad_status_is_a_422_naming_it_and_users_are_refused(
    client: Client, store: Store
) -> None:
    await setup_links(store)
    for bad in ("done", ""):
        body = await problem(await client.get(f"/v1/admin/jobs?status={bad}", headers=ADMIN), 422)
        assert [e["field"] for e in body["errors"]] == ["status"]
        assert "queued" in body["errors"][0]["message"]
    await problem(await client.get("/v1/admin/jobs", headers=bearer()), 403)
    await problem(await client.get("/v1/admin/jobs"), 401)
