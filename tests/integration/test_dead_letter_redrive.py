"""Bulk redrive: ``POST /v1/admin/dead-letters/redrive?group=&event_type=`` and
``sluice dlq redrive --group G --type T`` send back exactly the matching dead letters,
from every partition (4 here, on one Redis and on a cluster), and the groups then
handle them."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.cli.stream_commands import dlq
from sluice.config import Config
from sluice.events import Event, decode, encode, type_name
from sluice.process.resources import Resources
from tests.engine_app import APPS, PingAnswered, Pinged
from tests.link_helpers import OWNER_TOKEN, add_user, bearer

pytestmark = [
    pytest.mark.topologies("single", "cluster"),
    pytest.mark.apps(APPS),
]

TOKEN = "redrive-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
Client = TestClient[web.Request, web.Application]
PONGS, STATS = (
    "pongs",
    "link-stats",
)  # the engine test app's group (tests/engine_app), a built-in one
SOURCES = ["a1", "a2", "a3", "a4", "a5"]  # spread over the partitions


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=TOKEN, stream_partitions=4)


@pytest.fixture
async def api(aiohttp_client: Callable[..., Awaitable[Client]], config: Config) -> Client:
    return await aiohttp_client(create_app(config))


async def dead_letter(resources: Resources, group: str, event: Event, seq: int) -> None:
    """``event`` in ``group``'s dead letters of its own partition, as the runtime leaves it
    after the last delivery (written straight there: the event's stream stays empty, so
    no other group gets it)."""
    keys = resources.keys
    partition = keys.partition_of(getattr(event, "source", None) or event.code)
    fields = {
        "event_id": event.event_id,
        "seq": str(seq),
        "type": type_name(event),
        "trace_id": event.trace_id,
        "data": encode(event).decode(),
        "origin": keys.stream(event.aggregate, partition),
        "group": group,
        "error": "Boom: it broke",
        "deliveries": "5",
        "failed_at": "2026-03-01T00:00:00Z",
    }
    await resources.redis.xadd(keys.dead(group, partition), fields)  # type: ignore[arg-type]


async def seed(resources: Resources) -> None:
    """Each group holds dead letters of both types."""
    seq = 0
    for group in (PONGS, STATS):
        for source in SOURCES if group == PONGS else SOURCES[:2]:
            seq += 1
            await dead_letter(resources, group, Pinged(source=source, note="v"), seq)
        for n in range(2 if group == PONGS else 3):
            seq += 1
            visit = LinkVisited(code=f"code{n}", visitor=f"visitor-{n}")
            await dead_letter(resources, group, visit, seq)


async def remaining(api: Client) -> list[tuple[str, str]]:
    response = await api.get("/v1/admin/dead-letters", params={"limit": "100"}, headers=ADMIN)
    assert response.status == 200, await response.text()
    return sorted((d["group"], d["event_type"]) for d in await response.json())


async def redrive(api: Client, **query: str) -> Any:
    return await api.post("/v1/admin/dead-letters/redrive", params=query, headers=ADMIN)


async def answered(resources: Resources) -> list[str]:
    """The sources of the pings the ``pongs`` group answered, in order."""
    rows = await resources.store.events_after(0, 1000, types=("PingAnswered",))
    return sorted(
        e.source for e in (decode(r.payload) for r in rows) if isinstance(e, PingAnswered)
    )


async def visits_of(resources: Resources, code: str) -> int:
    row = await resources.store.fetchone("SELECT total FROM link_stats WHERE code = ?", (code,))
    return int(row[0]) if row else 0


async def test_redrive_by_group_and_type_moves_exactly_those_and_they_are_handled(
    resources: Resources, api: Client, start_worker: Callable[..., object]
) -> None:
    await seed(resources)
    assert len(await remaining(api)) == 5 + 2 + 2 + 3

    response = await redrive(api, group=PONGS, event_type="Pinged")
    assert response.status == 202, await response.text()
    assert await response.json() == {"redriven": 5}
    assert (
        await remaining(api)
        == [(STATS, "LinkVisited")] * 3 + [(STATS, "Pinged")] * 2 + [(PONGS, "LinkVisited")] * 2
    )
    start_worker(PONGS)

    async def all_answered() -> bool:
        return await answered(resources) == SOURCES

    await wait_for(all_answered)

    # By type alone: that type's letters in every group.
    response = await redrive(api, event_type="LinkVisited")
    assert (response.status, await response.json()) == (202, {"redriven": 5})
    assert await remaining(api) == [(STATS, "Pinged")] * 2
    start_worker(STATS)

    async def counted() -> bool:
        return [await visits_of(resources, f"code{n}") for n in range(3)] == [1, 1, 1]

    await wait_for(counted)
    # Nothing matching: 0, and nothing else moves.
    response = await redrive(api, group=PONGS, event_type="LinkVisited")
    assert (response.status, await response.json()) == (202, {"redriven": 0})
    assert await remaining(api) == [(STATS, "Pinged")] * 2


async def test_the_cli_redrives_by_group_and_type(
    resources: Resources, api: Client, config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    await seed(resources)
    args = argparse.Namespace(action="redrive", target=[], group=STATS, type="LinkVisited")
    assert await dlq(config, args) == 0
    assert "3 dead letters sent back" in capsys.readouterr().out
    assert (STATS, "LinkVisited") not in await remaining(api)
    assert len(await remaining(api)) == 9

    for target, group, kind, says in [
        (["1-1"], STATS, None, "not both"),
        ([], None, None, "--group and/or --type"),
        ([], "nosuch", None, "unknown group"),
        ([], None, "Nope", "unknown event type"),
    ]:
        bad = argparse.Namespace(action="redrive", target=target, group=group, type=kind)
        assert await dlq(config, bad) == 2
        assert says in capsys.readouterr().err
    assert len(await remaining(api)) == 9


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({}, "group"),
        ({"group": "", "event_type": ""}, "group"),
        ({"group": "nosuch"}, "group"),
        ({"event_type": "Nope"}, "event_type"),
        ({"group": PONGS, "event_type": "pinged"}, "event_type"),
    ],
)
async def test_missing_or_unknown_filters_are_422_and_move_nothing(
    resources: Resources, api: Client, query: dict[str, str], field: str
) -> None:
    await seed(resources)
    response = await redrive(api, **query)
    assert response.status == 422, await response.text()
    body = await response.json(content_type="application/problem+json")
    assert [e["field"] for e in body["errors"]] == [field]
    assert len(await remaining(api)) == 12


async def test_bulk_redrive_needs_the_admin_token(resources: Resources, api: Client) -> None:
    await add_user(resources.store)
    path = "/v1/admin/dead-letters/redrive?group=mail"
    assert (await api.post(path)).status == 401
    assert (await api.post(path, headers=bearer(OWNER_TOKEN))).status == 403
