"""``sluice replay article-views`` rebuilds the same numbers while views keep arriving."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from sluice.app.assembly import default_apps
from sluice.app.testing import wait_for
from sluice.builtin.articles.keys import ArticlesKeys
from sluice.builtin.articles.periods import period_start
from sluice.consumers.consumer import Consumer
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.projections.replay import rebuild
from sluice.relay.relay import Relay
from tests.integration.faults_helpers import settle
from tests.integration.helpers import post_views, views

pytestmark = pytest.mark.topologies("single", "cluster")


async def _period_sum(resources: Resources, article: str) -> int:
    row = await resources.store.fetchone(
        "SELECT COALESCE(SUM(views), 0) FROM article_view_periods"
        " WHERE article_id = ? AND period = 'day'",
        (article,),
    )
    return int(row[0]) if row else 0


async def test_replay_repairs_a_projection_and_counts_views_arriving_meanwhile(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., Consumer]
) -> None:
    start_relay()
    start_worker()
    await post_views(resources, "live", 300)
    await post_views(resources, "other", 7)

    async def first_drain() -> bool:
        return await views(resources, "live") == 300

    await wait_for(first_drain)
    # Damage the live projection, as a bug in an earlier release would have.
    async with resources.store.transaction() as tx:
        await tx.execute("UPDATE article_views SET views = 1 WHERE article_id = 'other'")

    writer = asyncio.create_task(post_views(resources, "live", 400, start=300))
    serving: list[int] = []
    rebuilt = asyncio.Event()

    async def read_while_rebuilding() -> None:
        while not (writer.done() and rebuilt.is_set()):
            serving.append(await views(resources, "live"))
            await asyncio.sleep(0.005)

    reader = asyncio.create_task(read_while_rebuilding())

    async def new_views_counted() -> bool:  # so the rebuild races views still arriving
        return bool(serving) and serving[-1] > 300

    await wait_for(new_views_counted)
    result = await rebuild(
        resources, default_apps().projections["article-views"], chunk=50, progress=False
    )
    rebuilt.set()
    await writer
    await reader

    assert result.events >= 307
    # Readers kept the live numbers through the rebuild and the swap: never lower
    # than what they had already seen, never more than was sent.
    assert serving[0] >= 300 and serving[-1] <= 700
    assert serving == sorted(serving), "a reader saw the count go down"

    # Exact once everything is published and acked: a late extra count would show.
    await settle(resources, resources.redis, "live", 700)
    assert await views(resources, "other") == 7
    assert await _period_sum(resources, "live") == 700
    top = await resources.redis.zrevrange(
        ArticlesKeys(resources.keys.prefix).top("day", _today(resources)), 0, -1, withscores=True
    )
    assert dict(top) == {b"live": 700.0, b"other": 7.0}


def _today(resources: Resources) -> str:
    return period_start("day", utcnow(), resources.config.zone).isoformat()


async def test_replay_of_an_empty_history_swaps_in_empty_tables(resources: Resources) -> None:
    result = await rebuild(resources, default_apps().projections["article-views"], progress=False)
    assert (result.events, result.watermark) == (0, 0)
    assert await views(resources, "anything") == 0
