"""``Tx.upsert_rows`` on both stores: new rows inserted, existing ones added to or
overwritten column by column, all in one statement, and nothing of a failed one kept."""

from __future__ import annotations

import pytest

from sluice.store import Store


async def views(store: Store) -> dict[str, tuple[int, str]]:
    rows = await store.fetchall("SELECT article_id, views, updated_at FROM article_views")
    return {str(a): (int(n), str(at)) for a, n, at in rows}


async def test_rows_are_added_to_or_inserted_and_the_replaced_columns_overwritten(
    store: Store,
) -> None:
    columns = ("article_id", "views", "updated_at")
    async with store.transaction() as tx:
        await tx.upsert_rows(
            "article_views",
            columns,
            [("a", 2, "t1"), ("b", 5, "t1")],
            keys=("article_id",),
            add=("views",),
            replace=("updated_at",),
        )
    async with store.transaction() as tx:
        await tx.upsert_rows(
            "article_views",
            columns,
            [("b", 3, "t2"), ("c", 1, "t2")],
            keys=("article_id",),
            add=("views",),
            replace=("updated_at",),
        )
        await tx.upsert_rows("article_views", columns, [], keys=("article_id",), add=("views",))
    assert await views(store) == {"a": (2, "t1"), "b": (8, "t2"), "c": (1, "t2")}


async def test_many_rows_with_a_composite_key_go_in_whole(store: Store) -> None:
    columns = ("period", "start", "article_id", "views")
    keys = ("period", "start", "article_id")
    rows = [("day", f"2026-12-{d:02}", f"article-{i}", i) for d in (1, 2) for i in range(3000)]
    for _ in range(2):
        async with store.transaction() as tx:
            await tx.upsert_rows("article_view_periods", columns, rows, keys=keys, add=("views",))
    counted = await store.fetchall(
        "SELECT COUNT(*), SUM(views) FROM article_view_periods WHERE period = 'day'"
    )
    assert [tuple(map(int, row)) for row in counted] == [(6000, 2 * 2 * sum(range(3000)))]


async def test_a_failed_upsert_leaves_the_rows_as_they_were(store: Store) -> None:
    columns = ("article_id", "views", "updated_at")
    async with store.transaction() as tx:
        await tx.upsert_rows(
            "article_views", columns, [("a", 1, "t1")], keys=("article_id",), add=("views",)
        )
    with pytest.raises(Exception, match=r"(?i)null"):
        async with store.transaction() as tx:
            await tx.upsert_rows(
                "article_views",
                columns,
                [("a", 1, "t2"), ("z", 1, None)],  # updated_at is NOT NULL
                keys=("article_id",),
                add=("views",),
                replace=("updated_at",),
            )
    assert await views(store) == {"a": (1, "t1")}
