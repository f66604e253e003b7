"""A flow group over the admin API with entries waiting (docs/guides/operate.md,
"Operate flow control"): the group's view with its ``flow`` (null for a group without
one), a key's waiting entries a page at a time, the 404s and 422s, the admin token,
and the flow gauges of ``/metrics``; on one Redis and a Redis Cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.app.assembly import create_app
from sluice.config import Config
from sluice.http.app_keys import KEYS, REDIS
from tests.api.helpers import AiohttpClient, Client, problem
from tests.flow_app import APPS
from tests.flow_app.waiting import hold_and_park
from tests.link_helpers import bearer

pytestmark = pytest.mark.topologies("single", "cluster")

TOKEN = "flow-admin-token-0123456789abcdef"
ADMIN = bearer(TOKEN)


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, make_config: Callable[..., Config]) -> Client:
    client = await aiohttp_client(create_app(make_config(admin_token=TOKEN, apps=APPS)))
    assert client.app is not None
    await hold_and_park(client.app[REDIS], client.app[KEYS])
    return client


async def get(client: Client, path: str) -> Any:
    response = await client.get(path, headers=ADMIN)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_the_groups_view_shows_its_keys_and_entries_waiting(admin: Client) -> None:
    view = await get(admin, "/v1/admin/groups/throttled")
    assert view["group"] == "throttled" and view["paused"] is False
    flow = view["flow"]
    assert flow["key"] == "tenant" and flow["concurrency"] == 4 and flow["rate"] is None
    assert (flow["keys_waiting"], flow["entries_waiting"], flow["deferred_total"]) == (2, 8, 8)
    assert flow["slots_in_use"] == 8
    assert [(k["key"], k["waiting"], k["slots_in_use"]) for k in flow["top_keys"]] == [
        ("a", 6, 4),
        ("b", 2, 4),
    ]
    assert (await get(admin, "/v1/admin/groups/mail"))["flow"] is None


async def test_a_keys_waiting_entries_come_a_page_at_a_time(admin: Client) -> None:
    path = "/v1/admin/groups/throttled/flow/waiting?key=a&limit=4"
    first = await get(admin, path)
    assert [e["event_id"] for e in first["entries"]] == ["a4", "a5", "a6", "a7"]
    assert first["entries"][0]["type"] == "WorkQueued"
    assert first["entries"][0]["waiting_since"]
    assert (first["waiting"], first["slots_in_use"]) == (6, 4)
    second = await get(admin, f"{path}&cursor={first['next_cursor']}")
    assert [e["event_id"] for e in second["entries"]] == ["a8", "a9"]
    assert second["next_cursor"] is None
    empty = await get(admin, "/v1/admin/groups/throttled/flow/waiting?key=nobody")
    assert (empty["entries"], empty["waiting"]) == ([], 0)


async def test_unknown_groups_groups_without_flow_and_bad_queries(admin: Client) -> None:
    for path in ("/v1/admin/groups/nope", "/v1/admin/groups/nope/flow/waiting?key=a"):
        body = await problem(await admin.get(path, headers=ADMIN), 404)
        assert "nope" in body["detail"]
    body = await problem(
        await admin.get("/v1/admin/groups/mail/flow/waiting?key=a", headers=ADMIN), 404
    )
    assert "no flow control" in body["detail"]
    for query, field in (("", "key"), ("key=a&limit=0", "limit"), ("key=a&cursor=x", "cursor")):
        path = f"/v1/admin/groups/throttled/flow/waiting?{query}"
        body = await problem(await admin.get(path, headers=ADMIN), 422)
        assert field in str(body), body
    await problem(await admin.get("/v1/admin/groups/throttled"), 401)


async def test_metrics_show_the_flow_gauges(admin: Client) -> None:
    response = await admin.get("/metrics", headers=ADMIN)
    assert response.status == 200
    samples = {
        (s.name, s.labels.get("group")): s.value
        for family in text_string_to_metric_families(await response.text())
        for s in family.samples
        if s.name.startswith("sluice_flow_")
    }
    assert samples[("sluice_flow_waiting_entries", "throttled")] == 8
    assert samples[("sluice_flow_waiting_keys", "throttled")] == 2
    assert samples[("sluice_flow_slots_in_use", "throttled")] == 8
    assert ("sluice_flow_waiting_entries", "mail") not in samples
