"""At most ``SLUICE_EXPORTS_PER_USER`` (3) exports per user queued or running at once.

Issue 20, finding 8: one account requested 80 exports and another user's waited
behind them. Beyond the limit the API answers 429 with ``Retry-After`` and
writes nothing; the worker's turn-taking is tested in
``tests/integration/test_export_fairness.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from sluice.app.assembly import assemble
from sluice.builtin.links.events import ExportRequested
from sluice.builtin.links.exports.runner import run_export
from sluice.builtin.links.settings import LinksSettings
from sluice.config import Config, load_config
from sluice.errors import ConfigError
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events
from tests.api.job_helpers import deps, request_export
from tests.link_helpers import OTHER, OTHER_TOKEN, add_link, add_user

CODES = ["e1", "e2", "e3", "e4", "e5", "e6"]


async def setup_links(store: Store) -> None:
    await add_user(store)
    for code in CODES:
        await add_link(store, code, f"https://example.org/{code}")
    await add_link(store, "theirs", "https://example.org/", owner=OTHER)
    await add_user(store, OTHER, OTHER_TOKEN)


async def written(store: Store) -> tuple[int, int]:
    """(job rows, ExportRequested events)."""
    rows = await store.fetchall("SELECT id FROM jobs")
    events = [e for e, _ in await stored_events(store) if isinstance(e, ExportRequested)]
    return len(rows), len(events)


async def test_a_fourth_export_at_once_is_429_with_retry_after_and_writes_nothing(
    client: Client, store: Store, config: Config
) -> None:
    await setup_links(store)
    assert LinksSettings.of(config).exports_per_user == 3
    started = []
    for code in CODES[:3]:
        response = await request_export(client, code)
        assert response.status == 202, await response.text()
        started.append(await response.json())
    fourth = await request_export(client, "e4")
    body = await problem(fourth, 429)
    assert int(fourth.headers["Retry-After"]) >= 1
    assert "3 exports queued or running" in body["detail"]
    assert await written(store) == (3, 3)
    # Asking again for a link whose export is queued is still that same job: no new work.
    again = await request_export(client, "e1")
    assert again.status == 202 and await again.json() == started[0]
    # Another user's exports are not counted against this one's.
    theirs = await request_export(client, "theirs", OTHER_TOKEN)
    assert theirs.status == 202, await theirs.text()
    # Once one has finished, there is room again.
    await run_export(started[0]["job_id"], deps(client, store, config))
    assert (await request_export(client, "e4")).status == 202
    await problem(await request_export(client, "e5"), 429)
    assert await written(store) == (5, 5)


async def test_requests_at_the_same_time_cannot_pass_the_limit_together(
    client: Client, store: Store
) -> None:
    await setup_links(store)
    responses = await asyncio.gather(*(request_export(client, code) for code in CODES))
    statuses = sorted(response.status for response in responses)
    assert statuses == [202, 202, 202, 429, 429, 429]
    assert await written(store) == (3, 3)


def test_the_limit_is_set_by_sluice_exports_per_user_and_is_at_least_one() -> None:
    assert LinksSettings.of(load_config({})).exports_per_user == 3
    assert LinksSettings.of(load_config({"SLUICE_EXPORTS_PER_USER": "1"})).exports_per_user == 1
    with pytest.raises(ConfigError, match=r"SLUICE_EXPORTS_PER_USER .* app 'links'"):
        assemble(load_config({"SLUICE_EXPORTS_PER_USER": "0"}))
