"""CSV imports through the API, run in process, and the links they left."""

from __future__ import annotations

from typing import Any

from sluice.builtin.links.imports.runner import ImportDeps, run_import
from sluice.config import Config
from sluice.http.app_keys import KEYS, REDIS
from sluice.process.resources import Resources
from sluice.store import Store
from tests.api.helpers import Client
from tests.link_helpers import bearer

CSV = {"Content-Type": "text/csv"}


async def upload(client: Client, body: bytes, token: str | None = None, **headers: str) -> Any:
    auth = bearer() if token is None else bearer(token)
    return await client.post("/v1/links/imports", data=body, headers={**CSV, **auth, **headers})


async def imported(client: Client, store: Store, config: Config, body: bytes) -> dict[str, Any]:
    """Upload ``body``, run its job in process, and return the job's result document."""
    response = await upload(client, body)
    assert response.status == 202, await response.text()
    job_id = (await response.json())["job_id"]
    assert client.app is not None
    resources = Resources(config, store, client.app[REDIS], client.app[KEYS])
    await run_import(job_id, ImportDeps.from_resources(resources))
    job = await (await client.get(f"/v1/jobs/{job_id}", headers=bearer())).json()
    assert (job["kind"], job["status"], job["progress"]) == ("import", "succeeded", 100), job
    assert job["result_url"] == f"{config.base_url}/v1/jobs/{job_id}/result"
    result = await client.get(f"/v1/jobs/{job_id}/result", headers=bearer())
    assert result.status == 200
    assert result.content_type == "application/json"
    assert "import-" in result.headers["Content-Disposition"]
    document: dict[str, Any] = await result.json()
    return document


async def links_of(store: Store, owner: str) -> dict[str, tuple[str, str]]:
    rows = await store.fetchall(
        "SELECT code, url, owner_id FROM links WHERE owner_id = ?", (owner,)
    )
    return {str(code): (str(url), str(owner_id)) for code, url, owner_id in rows}
