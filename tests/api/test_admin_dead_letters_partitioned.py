"""Dead letters with 4 stream partitions: ids that carry the partition, one listing of
every partition's letters, redrive and drop in the right partition, by the API and the CLI."""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from sluice.app.assembly import create_app
from sluice.cli.stream_commands import dlq
from sluice.config import Config
from sluice.process.resources import keys_for
from sluice.streams.engine_keys import Keys
from sluice.streams.failures import Failures
from tests.api.helpers import AiohttpClient, Client, listed, problem

# Four partitions on one Redis (the tests set them), and the same on a cluster.
pytestmark = pytest.mark.topologies("single", "cluster")

TOKEN = "dlq-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
PARTITIONS = 4


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=TOKEN, stream_partitions=PARTITIONS)


@pytest.fixture
def keys(config: Config) -> Keys:
    return keys_for(config)


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, config: Config) -> Client:
    return await aiohttp_client(create_app(config))


async def kill(
    redis: aioredis.Redis, keys: Keys, group: str, partition: int, event_id: str, **entry: str
) -> str:
    """An entry of ``partition``'s links stream sent to ``group``'s dead letters, as the
    runtime does; its raw entry id (``entry`` may fix the dead letter's id)."""
    stream = keys.stream("links", partition)
    with contextlib.suppress(ResponseError):  # the group exists
        await redis.xgroup_create(stream, group, id="$", mkstream=True)
    fields: dict[Any, Any] = {"event_id": event_id, "seq": "1", "type": "LinkVisited", "data": "{}"}
    added: Any = await redis.xadd(stream, fields)
    entry_id = added.decode()
    await redis.xreadgroup(group, "c1", {stream: ">"}, count=1000)
    if "id" in entry:  # a dead letter with a chosen id, as two streams may hold
        await redis.xadd(keys.dead(group, partition), {**fields, "group": group}, id=entry["id"])
        return entry["id"]
    dead_id = await Failures(redis, keys, group, partition).dead(stream, entry_id, fields, 5, "x")
    assert dead_id is not None
    return dead_id


async def test_every_partition_is_listed_newest_first_with_the_partition_in_the_id(
    admin: Client, redis: aioredis.Redis, keys: Keys
) -> None:
    made = [
        (await kill(redis, keys, group, partition, f"ev-{n}"), group, partition)
        for n, (group, partition) in enumerate(
            [("mail", 2), ("article-views", 0), ("mail", 3), ("article-views", 2)]
        )
    ]
    letters = await listed(admin)
    assert [(d["id"], d["group"], d["partition"]) for d in letters] == [
        (f"p{partition}-{entry}", group, partition) for entry, group, partition in reversed(made)
    ]
    assert all(re.fullmatch(r"p\d-\d+-\d+", d["id"]) for d in letters)
    assert letters[0]["stream"] == keys.stream("links", 2)
    assert [d["event_id"] for d in await listed(admin, group="mail")] == ["ev-2", "ev-0"]
    assert [d["event_id"] for d in await listed(admin, limit="3")] == ["ev-3", "ev-2", "ev-1"]


async def test_redrive_and_drop_act_on_the_partition_the_id_names(
    admin: Client, redis: aioredis.Redis, keys: Keys
) -> None:
    # One entry id in two partitions of one group: only the partition tells them apart.
    for partition in (1, 3):
        await kill(redis, keys, "mail", partition, f"ev-{partition}", id="1000-1")

    response = await admin.post("/v1/admin/dead-letters/p3-1000-1/redrive", headers=ADMIN)
    assert response.status == 202, await response.text()
    body = await response.json()
    assert (body["id"], body["group"], body["partition"]) == ("p3-1000-1", "mail", 3)
    retries: Any = await redis.xrange(keys.retry("mail", 3))
    [(retry_id, fields)] = retries
    assert (retry_id.decode(), fields[b"event_id"]) == (body["retry_id"], b"ev-3")
    assert await redis.xlen(keys.retry("mail", 1)) == 0
    assert [d["id"] for d in await listed(admin)] == ["p1-1000-1"]

    assert (await admin.delete("/v1/admin/dead-letters/p1-1000-1", headers=ADMIN)).status == 204
    assert await listed(admin) == []
    await problem(await admin.delete("/v1/admin/dead-letters/p1-1000-1", headers=ADMIN), 404)


async def test_a_bare_entry_id_is_looked_up_in_every_partition(
    admin: Client, redis: aioredis.Redis, keys: Keys
) -> None:
    entry = await kill(redis, keys, "exports", 2, "ev-bare")
    response = await admin.post(f"/v1/admin/dead-letters/{entry}/redrive", headers=ADMIN)
    assert response.status == 202, await response.text()
    assert (await response.json())["id"] == f"p2-{entry}"
    assert await redis.xlen(keys.retry("exports", 2)) == 1

    for partition in (0, 1):
        await kill(redis, keys, "mail", partition, f"ev-{partition}", id="2000-1")
    ambiguous = await admin.delete("/v1/admin/dead-letters/2000-1", headers=ADMIN)
    detail = (await problem(ambiguous, 409))["detail"]
    assert "mail p0-2000-1, mail p1-2000-1" in detail and "with its partition" in detail
    assert len(await listed(admin)) == 2


@pytest.mark.parametrize(
    ("dead_id", "says"),
    [
        ("p4-1-0", "there are 4 (p0 to p3)"),
        ("p99999-1-0", "there are 4"),
        ("p-1-0", "not a dead letter id"),
        ("q1-1-0", "not a dead letter id"),
        ("p1-1", "not a dead letter id"),
        ("p1-99999999999999999999-0", "not a dead letter id"),
    ],
)
async def test_a_malformed_id_or_a_partition_out_of_range_is_404_saying_so(
    admin: Client, dead_id: str, says: str
) -> None:
    for method, path in [
        ("POST", f"/v1/admin/dead-letters/{dead_id}/redrive"),
        ("DELETE", f"/v1/admin/dead-letters/{dead_id}"),
    ]:
        body = await problem(await admin.request(method, path, headers=ADMIN), 404)
        assert says in body["detail"]


async def test_cli_lists_redrives_and_drops_by_the_partitioned_id(
    admin: Client,
    config: Config,
    redis: aioredis.Redis,
    keys: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = await kill(redis, keys, "mail", 1, "ev-c1")
    second = await kill(redis, keys, "article-views", 3, "ev-c2")
    assert await dlq(config, argparse.Namespace(action="list", group=None, limit=50)) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "ev-c" in line]
    assert [line.split()[:2] for line in lines] == [
        ["article-views", f"p3-{second}"],
        ["mail", f"p1-{first}"],
    ]
    assert [line.split()[1] for line in lines] == [d["id"] for d in await listed(admin)]

    assert await dlq(config, argparse.Namespace(action="redrive", target=[f"p1-{first}"])) == 0
    assert await redis.xlen(keys.retry("mail", 1)) == 1
    drop = argparse.Namespace(action="drop", target=["article-views", f"p3-{second}"])
    assert await dlq(config, drop) == 0
    assert await listed(admin) == []

    for target in (["p7-1-0"], ["mail", "p1-x"]):
        assert await dlq(config, argparse.Namespace(action="drop", target=target)) == 2
    err = capsys.readouterr().err
    assert "names partition 7, but there are 4" in err and "not a dead letter id" in err
    for partition in (0, 2):
        await kill(redis, keys, "mail", partition, f"ev-{partition}", id="3000-1")
    assert await dlq(config, argparse.Namespace(action="drop", target=["3000-1"])) == 1
    assert "held by mail p0-3000-1, mail p2-3000-1" in capsys.readouterr().err
    assert len(await listed(admin)) == 2
