"""Export jobs through the API, for the tests of jobs: the links to export, the job requested
and its stored result."""

from __future__ import annotations

from typing import Any

from sluice.builtin.links.exports.runner import ExportDeps
from sluice.config import Config
from sluice.http.app_keys import KEYS, REDIS
from sluice.process.resources import Resources
from sluice.store import Store
from tests.api.helpers import Client
from tests.link_helpers import OTHER, OTHER_TOKEN, add_link, add_user, bearer

CODE = "export1"


async def setup_links(store: Store) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_user(store)
    await add_link(store, "theirs", "https://example.org/", owner=OTHER)
    await add_user(store, OTHER, OTHER_TOKEN)


async def request_export(client: Client, code: str = CODE, token: str | None = None) -> Any:
    headers = bearer() if token is None else bearer(token)
    return await client.post(f"/v1/links/{code}/exports", headers=headers)


async def start(client: Client) -> dict[str, Any]:
    response = await request_export(client)
    assert response.status == 202, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def deps(client: Client, store: Store, config: Config) -> ExportDeps:
    assert client.app is not None
    return ExportDeps.from_resources(Resources(config, store, client.app[REDIS], client.app[KEYS]))


async def stored_bytes(store: Store, job_id: str) -> int:
    row = await store.fetchone(
        "SELECT COALESCE(SUM(length(data)), 0) FROM export_chunks WHERE job_id = ?", (job_id,)
    )
    assert row is not None
    return int(row[0])


async def job_body(client: Client, job_id: str, token: str | None = None) -> Any:
    headers = bearer() if token is None else bearer(token)
    return await client.get(f"/v1/jobs/{job_id}", headers=headers)
