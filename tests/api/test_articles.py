"""GET /v1/articles/{id} and the leaderboards."""

from __future__ import annotations

from datetime import date

import redis.asyncio as aioredis

from sluice.builtin.articles.keys import ArticlesKeys
from sluice.builtin.articles.periods import period_start
from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow
from sluice.store import Store
from tests.api.helpers import Client


async def add_period_rows(store: Store, period: str, start: date, rows: dict[str, int]) -> None:
    async with store.transaction() as tx:
        await tx.executemany(
            "INSERT INTO article_view_periods (period, start, article_id, views)"
            " VALUES (?, ?, ?, ?)",
            [(period, start.isoformat(), article, views) for article, views in rows.items()],
        )


def current(period: str, config: Config) -> date:
    return period_start(period, utcnow(), config.zone)


async def test_unknown_article_has_zero_views(client: Client) -> None:
    response = await client.get("/v1/articles/never-seen")
    assert response.status == 200
    body = await response.json()
    assert body["article_id"] == "never-seen"
    assert body["views"] == 0
    assert body["as_of"].endswith("Z")
    assert body["as_of"][:10] == utcnow().date().isoformat()


async def test_article_views_come_from_the_projection(client: Client, store: Store) -> None:
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO article_views (article_id, views, updated_at) VALUES (?, ?, ?)",
            ("a1", 7, utcnow().isoformat()),
        )
    body = await (await client.get("/v1/articles/a1")).json()
    assert body["views"] == 7


async def test_top_from_the_database_when_the_sorted_set_is_missing(
    client: Client, store: Store, config: Config
) -> None:
    start = current("week", config)
    await add_period_rows(store, "week", start, {"a": 3, "b": 9, "c": 5, "d": 1})
    await add_period_rows(store, "day", current("day", config), {"other": 100})
    response = await client.get("/v1/articles/top", params={"period": "week", "limit": "3"})
    assert response.status == 200
    assert await response.json() == {
        "period": "week",
        "start": start.isoformat(),
        "items": [
            {"article_id": "b", "views": 9},
            {"article_id": "c", "views": 5},
            {"article_id": "a", "views": 3},
        ],
    }


async def test_top_defaults_to_the_current_day_and_ten_items(
    client: Client, store: Store, config: Config
) -> None:
    start = current("day", config)
    await add_period_rows(store, "day", start, {f"a{i:02}": i + 1 for i in range(12)})
    body = await (await client.get("/v1/articles/top")).json()
    assert body["period"] == "day"
    assert body["start"] == start.isoformat()
    assert [item["article_id"] for item in body["items"]] == [f"a{i:02}" for i in range(11, 1, -1)]


async def test_top_reads_the_redis_sorted_set_when_present(
    client: Client, store: Store, config: Config, redis: aioredis.Redis
) -> None:
    start = current("month", config)
    await add_period_rows(store, "month", start, {"from-db": 50})
    key = ArticlesKeys(config.stream_prefix).top("month", start.isoformat())
    await redis.zadd(key, {"x": 4, "y": 8, "z": 6})
    body = await (await client.get("/v1/articles/top?period=month&limit=2")).json()
    assert body["items"] == [{"article_id": "y", "views": 8}, {"article_id": "z", "views": 6}]


async def test_ties_rank_by_article_id_from_redis_and_from_the_database(
    client: Client, store: Store, config: Config, redis: aioredis.Redis
) -> None:
    start = current("day", config)
    views = {"a": 1, "m": 5, "c": 5, "x": 9, "b": 5, "z": 5, "d": 2}
    expected = ["x", "b", "c", "m"]  # the four fives in id order, cut after the second
    await add_period_rows(store, "day", start, views)
    from_store = await (await client.get("/v1/articles/top?limit=3")).json()
    await redis.zadd(ArticlesKeys(config.stream_prefix).top("day", start.isoformat()), views)
    from_redis = await (await client.get("/v1/articles/top?limit=3")).json()
    assert [i["article_id"] for i in from_store["items"]] == expected[:3]
    assert from_redis["items"] == from_store["items"]
    whole = await (await client.get("/v1/articles/top?limit=7")).json()
    assert [i["article_id"] for i in whole["items"]] == ["x", "b", "c", "m", "z", "d", "a"]


async def test_top_falls_back_to_the_database_with_redis_down(
    client: Client, store: Store, config: Config, redis_server: RedisServer
) -> None:
    await add_period_rows(store, "day", current("day", config), {"a": 2, "b": 4})
    redis_server.stop()
    response = await client.get("/v1/articles/top")
    assert response.status == 200
    body = await response.json()
    assert body["items"] == [{"article_id": "b", "views": 4}, {"article_id": "a", "views": 2}]


async def test_top_is_not_taken_for_an_article_id(client: Client) -> None:
    body = await (await client.get("/v1/articles/top")).json()
    assert "items" in body and "article_id" not in body
