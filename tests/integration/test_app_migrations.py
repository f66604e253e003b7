"""Tables that moved from sluice into an app keep their history: a database made before
the move keeps its rows and is not migrated twice; a database of a release before
migration 28 still gets that step's column on the moved table; a new database gets
the tables from the app. Both stores."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sluice.app.assembly import default_apps, open_store
from sluice.builtin.articles.projection import ARTICLE_VIEWS_DDL
from sluice.config import Config
from sluice.store import Store, migrations
from sluice.store.postgres import PostgresStore
from sluice.store.sqlite import SqliteStore
from tests.migration_history import migrations_before_split

# What sluice's migrations 2 and 7 made of these tables before the articles app held them.
LEADERBOARD = """
CREATE TABLE leaderboard_snapshots (
    day TEXT NOT NULL, rank INTEGER NOT NULL, article_id TEXT NOT NULL,
    views INTEGER NOT NULL, taken_at TEXT NOT NULL, PRIMARY KEY (day, rank)
) WITHOUT ROWID;
"""


async def _columns(store: Store, table: str) -> set[str]:
    rows = await store.fetchall(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
        if store.dialect.name == "postgres"
        else "SELECT name FROM pragma_table_info(?)",
        (table,),
    )
    return {str(row[0]) for row in rows}


async def _app_steps(store: Store) -> list[tuple[str, int]]:
    rows = await store.fetchall("SELECT owner, version FROM app_migrations ORDER BY 1, 2")
    return [(str(o), int(v)) for o, v in rows]


ARTICLE_STEPS = [("articles", 1), ("projection:article-views", 1), ("projection:article-views", 2)]


def every_step() -> list[tuple[str, int]]:
    """Every step of the default apps: the articles app's, and those of the apps that
    hold the tables of sluice's history since (tests/integration/test_migration_split.py)."""
    return sorted((step.owner, step.version) for step in default_apps().migrations)


async def test_a_new_database_gets_the_moved_tables_from_the_app(
    make_config: Callable[..., Config], empty_database_url: str | None
) -> None:
    store = await open_store(make_config(database_url=empty_database_url or ""))
    try:
        steps = await _app_steps(store)
        assert set(ARTICLE_STEPS) <= set(steps) and steps == every_step()
        assert await _columns(store, "article_views_processed") == {"event_id", "batch_id"}
        assert "views" in await _columns(store, "article_views")
        assert "rank" in await _columns(store, "leaderboard_snapshots")
        versions = {
            int(r[0]) for r in await store.fetchall("SELECT version FROM schema_migrations")
        }
        assert versions == {v for v, _, _ in migrations.MIGRATIONS}  # 2 too, empty now
    finally:
        await store.close()


async def _release_2(config: Config, monkeypatch: pytest.MonkeyPatch, upto: int) -> None:
    """The database a release before the move left: sluice's migrations up to ``upto``,
    the articles' tables made by them (as their text was then), a view counted."""
    monkeypatch.setattr(
        migrations, "MIGRATIONS", [m for m in migrations_before_split() if m[0] <= upto]
    )
    monkeypatch.setattr(migrations, "MOVED_OUT", frozenset())  # it ran each version whole
    store = await _core_only(config)
    try:
        async with store.transaction() as tx:
            await tx.execute_script(ARTICLE_VIEWS_DDL.format(s="") + LEADERBOARD)
            if upto >= 28:
                await tx.execute_script(
                    "ALTER TABLE article_views_processed ADD COLUMN batch_id INTEGER"
                )
            await tx.execute("INSERT INTO article_views VALUES ('kept', 7, '2026-01-01')")
    finally:
        await store.close()
    monkeypatch.undo()


async def _core_only(config: Config) -> Store:
    """The store with sluice's own migrations and no app's."""
    if config.postgres:
        return await PostgresStore.open(config.database_url, pool_size=2)
    return await SqliteStore.open(config.sqlite_path)


@pytest.mark.parametrize("upto", [28, 27])
async def test_a_database_from_before_the_move_keeps_its_rows_and_its_steps_are_not_rerun(
    make_config: Callable[..., Config],
    empty_database_url: str | None,
    monkeypatch: pytest.MonkeyPatch,
    upto: int,
) -> None:
    config = make_config(database_url=empty_database_url or "")
    await _release_2(config, monkeypatch, upto)
    store = await open_store(config)  # this release: the app's steps replace 2, 7 and 28
    try:
        # Had a step run again, its CREATE TABLE would have failed on the table there.
        assert await store.fetchall("SELECT article_id, views FROM article_views") == [("kept", 7)]
        assert await _app_steps(store) == every_step()  # recorded, as done
        # A database from before 28 gets that step's column from the app's step 2.
        assert await _columns(store, "article_views_processed") == {"event_id", "batch_id"}
        # ... and link_stats_processed's from the links app's step 14 (sluice's 28 before).
        assert "batch_id" in await _columns(store, "link_stats_processed")
    finally:
        await store.close()
