"""``GET /v1/admin/history``: what a worker really did, per minute, and every bad query.

The worker is ``sluice worker``'s coroutine (``run_worker``) with the relay, so the
history is written by the sampler every worker process runs; its ``article-views``
group fails every view of the article ``doomed`` (two deliveries: one retry, then the
dead letters).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from sluice.app.assembly import assemble, create_app, default_apps
from sluice.app.testing import wait_for
from sluice.builtin.articles.events import ArticleViewed
from sluice.cli.processes import run_relay, run_worker
from sluice.config import Config
from sluice.events import utcnow
from sluice.http.app_keys import STORE
from sluice.process.resources import Resources
from sluice.records.group_history.buckets import minute_of
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from tests.api.helpers import AiohttpClient, Client, problem
from tests.link_helpers import OWNER_TOKEN, add_user

TOKEN = "history-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
GROUP = "article-views"
FINE = 4


@pytest.fixture
def admin_config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=TOKEN, max_deliveries=2)


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, admin_config: Config) -> Client:
    return await aiohttp_client(create_app(admin_config))


async def history(admin: Client, **query: str) -> dict[str, Any]:
    response = await admin.get("/v1/admin/history", params=query, headers=ADMIN)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def failing_doomed(
    real: Callable[[Resources], GroupSpec],
) -> Callable[[Resources], GroupSpec]:
    """The real group, but every view of ``doomed`` fails."""

    def group(resources: Resources) -> GroupSpec:
        spec = real(resources)

        async def handler(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
            doomed = {
                d.message.key: RuntimeError("no such article")
                for d in ds
                if isinstance(d.event, ArticleViewed) and d.event.article_id == "doomed"
            }
            rest = [d for d in ds if d.message.key not in doomed]
            return {**(await spec.handler(rest) if rest else {}), **doomed}

        return replace(spec, handler=handler)

    return group


async def test_a_workers_outcomes_are_counted_in_their_minute(
    admin: Client, admin_config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(default_apps().groups, GROUP, failing_doomed(default_apps().groups[GROUP]))
    started = minute_of(utcnow())
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(run_relay(assemble(admin_config), stop)),
        asyncio.create_task(run_worker(assemble(admin_config), [GROUP], stop, consumer="w1")),
    ]
    try:
        for n, article in enumerate(["fine"] * FINE + ["doomed"]):
            response = await admin.post(f"/v1/articles/{article}/views", json={"viewer": f"v{n}"})
            assert response.status == 202, await response.text()

        async def all_settled() -> bool:
            views = await (await admin.get("/v1/articles/fine")).json()
            dead = await admin.get("/v1/admin/dead-letters", params={"group": GROUP}, headers=ADMIN)
            return views["views"] == FINE and len(await dead.json()) == 1

        await wait_for(all_settled)
    finally:
        stop.set()  # the worker's last sample is written as it stops
        await asyncio.gather(*tasks)
    ended = minute_of(utcnow())

    body = await history(admin, group=GROUP, minutes="10")
    assert body["minutes"] == 10
    [views] = body["groups"]
    assert views["group"] == GROUP
    points = views["points"]
    minutes = [datetime.fromisoformat(p["minute"]) for p in points]
    assert len(points) == 10 and ended <= minutes[-1] <= minute_of(utcnow())
    assert all(b - a == timedelta(minutes=1) for a, b in pairwise(minutes))
    assert points[0]["minute"].endswith(":00Z")
    during = [p for p, m in zip(points, minutes, strict=True) if started <= m <= ended]
    before = [p for p, m in zip(points, minutes, strict=True) if m < started]
    totals = {k: sum(p[k] for p in during) for k in ("handled", "failed", "dead_lettered")}
    assert totals == {"handled": FINE, "failed": 1, "dead_lettered": 1}
    assert all(p["handled"] == p["failed"] == p["dead_lettered"] == 0 for p in before)
    assert all(p["lag"] is None for p in before)
    # The last sample, after the work: nothing left undelivered.
    assert [p["lag"] for p in during if p["lag"] is not None][-1] == 0

    everyone = await history(admin)
    assert everyone["minutes"] == 60
    assert [g["group"] for g in everyone["groups"]] == sorted(default_apps().groups)
    assert all(len(g["points"]) == 60 for g in everyone["groups"])
    mail = next(g for g in everyone["groups"] if g["group"] == "mail")
    assert {(p["handled"], p["lag"]) for p in mail["points"]} == {(0, None)}


async def test_a_whole_day_is_1440_points(admin: Client) -> None:
    body = await history(admin, group="mail", minutes="1440")
    [mail] = body["groups"]
    assert len(mail["points"]) == 1440
    first, last = (datetime.fromisoformat(mail["points"][i]["minute"]) for i in (0, -1))
    assert last - first == timedelta(minutes=1439)


@pytest.mark.parametrize(
    "query, fields",
    [
        ({"minutes": "0"}, ["minutes"]),
        ({"minutes": "1441"}, ["minutes"]),
        ({"minutes": "-5"}, ["minutes"]),
        ({"minutes": "ten"}, ["minutes"]),
        ({"minutes": ""}, ["minutes"]),
        ({"group": "nope"}, ["group"]),
        ({"group": "nope", "minutes": "2.5"}, ["group", "minutes"]),
    ],
)
async def test_bad_parameters_are_422_naming_the_field(
    admin: Client, query: dict[str, str], fields: list[str]
) -> None:
    body = await problem(await admin.get("/v1/admin/history", params=query, headers=ADMIN), 422)
    assert [e["field"] for e in body["errors"]] == fields


async def test_the_admin_token_is_required(admin: Client) -> None:
    assert admin.app is not None
    await add_user(admin.app[STORE])
    await problem(await admin.get("/v1/admin/history"), 401)
    user = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    await problem(await admin.get("/v1/admin/history", headers=user), 403)
