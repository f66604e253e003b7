"""Pausing and resuming a handler group over the API: 204, idempotent, kept in the
database; unknown groups 404, the admin token required; the pause shows in
``GET /v1/admin/streams`` (``paused``) and in ``/metrics`` (``sluice_group_paused``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.app.assembly import create_app
from sluice.config import Config
from sluice.http.app_keys import KEYS, REDIS, STORE
from sluice.records.pause import paused_groups
from sluice.store import Store
from sluice.streams.group_setup import ensure_group
from tests.api.helpers import AiohttpClient, Client, problem
from tests.link_helpers import OWNER_TOKEN, add_user, bearer

TOKEN = "pause-admin-token-0123456789abcdef"
ADMIN = bearer(TOKEN)


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, make_config: Callable[..., Config]) -> Client:
    return await aiohttp_client(create_app(make_config(admin_token=TOKEN)))


def _store(client: Client) -> Store:
    assert client.app is not None
    return client.app[STORE]


async def streams(client: Client) -> dict[str, Any]:
    response = await client.get("/v1/admin/streams", headers=ADMIN)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def paused_flags(report: dict[str, Any]) -> dict[str, bool]:
    """Each group's ``paused`` on the streams it reads (the same on every one of them)."""
    flags: dict[str, set[bool]] = {}
    for stream in report["streams"]:
        for group in stream["groups"]:
            flags.setdefault(group["group"], set()).add(group["paused"])
    assert all(len(seen) == 1 for seen in flags.values()), flags
    return {group: seen.pop() for group, seen in flags.items()}


async def test_pause_and_resume_answer_204_and_show_in_the_streams_route(admin: Client) -> None:
    assert admin.app is not None
    redis, keys = admin.app[REDIS], admin.app[KEYS]
    for aggregate, group in (("users", "mail"), ("articles", "article-views")):
        await ensure_group(redis, keys.stream(aggregate, 0), group)
    assert (await streams(admin))["paused"] == []

    response = await admin.post("/v1/admin/groups/mail/pause", headers=ADMIN)
    assert response.status == 204, await response.text()
    report = await streams(admin)
    assert report["paused"] == ["mail"]
    assert paused_flags(report) == {"mail": True, "article-views": False}
    first = await paused_groups(_store(admin))

    again = await admin.post("/v1/admin/groups/mail/pause", headers=ADMIN)
    assert again.status == 204  # still paused, since the first pause
    assert await paused_groups(_store(admin)) == first

    response = await admin.post("/v1/admin/groups/mail/resume", headers=ADMIN)
    assert response.status == 204, await response.text()
    report = await streams(admin)
    assert report["paused"] == []
    assert paused_flags(report) == {"mail": False, "article-views": False}
    again = await admin.post("/v1/admin/groups/mail/resume", headers=ADMIN)
    assert again.status == 204


async def test_a_group_paused_before_it_has_a_stream_is_listed(admin: Client) -> None:
    assert (await admin.post("/v1/admin/groups/exports/pause", headers=ADMIN)).status == 204
    report = await streams(admin)
    assert report["paused"] == ["exports"]
    assert "exports" not in paused_flags(report)


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_an_unknown_group_is_404(admin: Client, action: str) -> None:
    body = await problem(await admin.post(f"/v1/admin/groups/nope/{action}", headers=ADMIN), 404)
    assert "nope" in body["detail"] and "mail" in body["detail"]
    assert await paused_groups(_store(admin)) == {}


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_pausing_needs_the_admin_token(admin: Client, action: str) -> None:
    path = f"/v1/admin/groups/mail/{action}"
    await problem(await admin.post(path), 401)
    await problem(await admin.post(path, headers=bearer("guess")), 401)
    await add_user(_store(admin))
    await problem(await admin.post(path, headers=bearer(OWNER_TOKEN)), 403)
    assert await paused_groups(_store(admin)) == {}


async def test_the_metric_says_which_groups_are_paused(admin: Client) -> None:
    assert (await admin.post("/v1/admin/groups/mail/pause", headers=ADMIN)).status == 204
    response = await admin.get("/metrics", headers=ADMIN)
    assert response.status == 200, await response.text()
    paused = {
        sample.labels["group"]: sample.value
        for family in text_string_to_metric_families(await response.text())
        if family.name == "sluice_group_paused"
        for sample in family.samples
    }
    assert paused["mail"] == 1
    assert paused["exports"] == 0 and paused["article-views"] == 0
