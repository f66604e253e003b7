"""Admin dead-letter routes (list, redrive, drop), the `sluice dlq list` twin, and GET /admin."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from sluice.app.assembly import create_app
from sluice.cli.stream_commands import dlq
from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.http.app_keys import STORE
from sluice.streams.engine_keys import Keys
from sluice.streams.failures import Failures
from tests.api.helpers import ADMIN, AiohttpClient, Client, listed, problem
from tests.link_helpers import OWNER_TOKEN, add_user

KEYS = Keys("sluice")


@pytest.fixture
def admin_config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token="dlq-admin-token-0123456789abcdef")


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, admin_config: Config) -> Client:
    return await aiohttp_client(create_app(admin_config))


async def kill(
    redis: aioredis.Redis, group: str, event_id: str, error: str = "boom", aggregate: str = "links"
) -> str:
    """Deliver one new entry to ``group`` and send it to the dead letters, as the runtime does."""
    stream = KEYS.stream(aggregate)
    with contextlib.suppress(ResponseError):  # the group exists
        await redis.xgroup_create(stream, group, id="$", mkstream=True)
    fields: dict[Any, Any] = {"event_id": event_id, "seq": "1", "type": "LinkVisited", "data": "{}"}
    added: Any = await redis.xadd(stream, fields)
    entry_id = added.decode()
    # Everything new to the group is delivered; only this entry dies.
    await redis.xreadgroup(group, "c1", {stream: ">"}, count=1000)
    dead_id = await Failures(redis, KEYS, group).dead(stream, entry_id, fields, 5, error)
    assert dead_id is not None
    return dead_id


async def test_dead_letters_are_listed_newest_first_with_their_details(
    admin: Client, redis: aioredis.Redis
) -> None:
    first = await kill(redis, "article-views", "ev-1", "no such article")
    second = await kill(redis, "mail", "ev-2", "550 mailbox unavailable")
    third = await kill(redis, "article-views", "ev-3")

    letters = await listed(admin)
    assert [d["id"] for d in letters] == [third, second, first]
    assert letters[1] == {
        "id": second,
        "group": "mail",
        "partition": 0,
        "stream": "sluice:links",
        "event_id": "ev-2",
        "event_type": "LinkVisited",
        "deliveries": 5,
        "error": "550 mailbox unavailable",
        "failed_at": letters[1]["failed_at"],
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", letters[1]["failed_at"])
    assert [d["event_id"] for d in await listed(admin, group="article-views")] == ["ev-3", "ev-1"]
    assert [d["event_id"] for d in await listed(admin, limit="2")] == ["ev-3", "ev-2"]
    assert [d["event_id"] for d in await listed(admin, group="")] == ["ev-3", "ev-2", "ev-1"]


async def test_redrive_sends_the_entry_back_to_its_group_once(
    admin: Client, redis: aioredis.Redis
) -> None:
    dead_id = await kill(redis, "mail", "ev-r")
    kept = await kill(redis, "mail", "ev-kept")

    response = await admin.post(f"/v1/admin/dead-letters/{dead_id}/redrive", headers=ADMIN)
    assert response.status == 202, await response.text()
    body = await response.json()
    assert (body["id"], body["group"]) == (dead_id, "mail")
    retries: Any = await redis.xrange(KEYS.retry("mail"))
    [(retry_id, fields)] = retries
    assert retry_id.decode() == body["retry_id"]
    assert fields[b"event_id"] == b"ev-r"
    assert [d["id"] for d in await listed(admin)] == [kept]

    again = await admin.post(f"/v1/admin/dead-letters/{dead_id}/redrive", headers=ADMIN)
    await problem(again, 404)
    assert await redis.xlen(KEYS.retry("mail")) == 1


async def test_drop_deletes_the_entry(admin: Client, redis: aioredis.Redis) -> None:
    dead_id = await kill(redis, "article-views", "ev-d")
    kept = await kill(redis, "article-views", "ev-kept")

    response = await admin.delete(f"/v1/admin/dead-letters/{dead_id}", headers=ADMIN)
    assert response.status == 204
    assert [d["id"] for d in await listed(admin)] == [kept]
    await problem(await admin.delete(f"/v1/admin/dead-letters/{dead_id}", headers=ADMIN), 404)
    assert await redis.xlen(KEYS.retry("article-views")) == 0


async def test_an_id_held_by_two_groups_needs_the_group(
    admin: Client, redis: aioredis.Redis
) -> None:
    fields: dict[Any, Any] = {"event_id": "ev-x", "type": "LinkVisited", "origin": "sluice:links"}
    for group in ("mail", "link-stats"):
        await redis.xadd(KEYS.dead(group), {**fields, "group": group}, id="1000-1")

    ambiguous = await admin.post("/v1/admin/dead-letters/1000-1/redrive", headers=ADMIN)
    assert "?group=" in (await problem(ambiguous, 409))["detail"]
    response = await admin.post(
        "/v1/admin/dead-letters/1000-1/redrive", params={"group": "mail"}, headers=ADMIN
    )
    assert response.status == 202
    assert (await response.json())["group"] == "mail"
    assert [d["group"] for d in await listed(admin)] == ["link-stats"]
    # Now only one group holds it: no group needed.
    assert (await admin.delete("/v1/admin/dead-letters/1000-1", headers=ADMIN)).status == 204
    assert await listed(admin) == []


async def test_admin_token_is_required(admin: Client, redis: aioredis.Redis) -> None:
    dead_id = await kill(redis, "mail", "ev-a")
    assert admin.app is not None
    await add_user(admin.app[STORE])
    user = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    calls = [
        ("GET", "/v1/admin/dead-letters"),
        ("POST", f"/v1/admin/dead-letters/{dead_id}/redrive"),
        ("DELETE", f"/v1/admin/dead-letters/{dead_id}"),
    ]
    for method, path in calls:
        await problem(await admin.request(method, path), 401)
        wrong = {"Authorization": "Bearer not-the-admin-token"}
        await problem(await admin.request(method, path, headers=wrong), 401)
        await problem(await admin.request(method, path, headers=user), 403)
    assert [d["id"] for d in await listed(admin)] == [dead_id]  # untouched


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"group": "nope"}, "group"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
    ],
)
async def test_bad_query_is_422(admin: Client, query: dict[str, str], field: str) -> None:
    response = await admin.get("/v1/admin/dead-letters", params=query, headers=ADMIN)
    body = await problem(response, 422)
    assert [e["field"] for e in body["errors"]] == [field]


async def test_unknown_ids_and_groups(admin: Client, redis: aioredis.Redis) -> None:
    dead_id = await kill(redis, "mail", "ev-u")
    for bad in ("1-1", "not-an-id", "99999999999999999999-0"):
        await problem(await admin.post(f"/v1/admin/dead-letters/{bad}/redrive", headers=ADMIN), 404)
        await problem(await admin.delete(f"/v1/admin/dead-letters/{bad}", headers=ADMIN), 404)
    # Held by mail, not by the group named.
    wrong = await admin.delete(
        f"/v1/admin/dead-letters/{dead_id}", params={"group": "link-stats"}, headers=ADMIN
    )
    await problem(wrong, 404)
    unknown = await admin.delete(
        f"/v1/admin/dead-letters/{dead_id}", params={"group": "nope"}, headers=ADMIN
    )
    await problem(unknown, 422)
    assert [d["id"] for d in await listed(admin)] == [dead_id]


async def test_redis_down_is_503(admin: Client, redis_server: RedisServer) -> None:
    redis_server.stop()
    await problem(await admin.get("/v1/admin/dead-letters", headers=ADMIN), 503)
    await problem(await admin.post("/v1/admin/dead-letters/1-1/redrive", headers=ADMIN), 503)
    await problem(await admin.delete("/v1/admin/dead-letters/1-1", headers=ADMIN), 503)


async def test_cli_lists_what_the_api_lists(
    admin: Client,
    admin_config: Config,
    redis: aioredis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    older = await kill(redis, "mail", "ev-c1", "first failure")
    newer = await kill(redis, "article-views", "ev-c2", "second failure")
    args = argparse.Namespace(action="list", group=None, limit=50)
    assert await dlq(admin_config, args) == 0
    lines = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("mail ", "article-views "))
    ]
    assert [line.split()[1] for line in lines] == [d["id"] for d in await listed(admin)]
    assert [line.split()[1] for line in lines] == [newer, older]
    assert "deliveries=5  first failure" in lines[1]


async def test_dashboard_page_is_served_with_a_strict_policy(client: Client) -> None:
    response = await client.get("/admin")
    assert response.status == 200
    assert response.content_type == "text/html"
    html = await response.text()
    assert '<label for="token">Admin token</label>' in html
    policy = response.headers["Content-Security-Policy"]
    script = re.search(r"<script>(.*?)</script>", html, re.DOTALL)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script[1].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    assert "connect-src 'self'" in policy
    assert (await client.head("/admin")).status == 200


async def test_cli_redrive_and_drop_find_the_group_when_it_is_left_out(
    admin: Client,
    admin_config: Config,
    redis: aioredis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = await kill(redis, "mail", "ev-d1")
    # Ids are per stream: two dead letters made in one millisecond share one (that
    # ambiguous case answers 409, tested above). Make the next in a later millisecond.
    while True:
        seconds, micros = await redis.time()
        if seconds * 1000 + micros // 1000 > int(first.split("-")[0]):
            break
        await asyncio.sleep(0.001)
    second = await kill(redis, "article-views", "ev-d2")
    assert second != first
    redrive = argparse.Namespace(action="redrive", target=[first])
    assert await dlq(admin_config, redrive) == 0
    drop = argparse.Namespace(action="drop", target=["article-views", second])
    assert await dlq(admin_config, drop) == 0
    assert await listed(admin) == []
    assert await redis.xlen(KEYS.retry("mail")) + await redis.zcard(KEYS.delayed("mail")) == 1
    # Gone now, and not an id at all.
    assert await dlq(admin_config, argparse.Namespace(action="drop", target=[first])) == 1
    assert await dlq(admin_config, argparse.Namespace(action="drop", target=["x"])) == 2
    assert "no such dead letter" in capsys.readouterr().err
