"""The built-in apps own the migrations of their tables (sluice/builtin/<app>/migrations.py),
which sluice's own history made before: a new database gets exactly the schema it got
before the split, and a database made before it (wholly or partly migrated) is not
migrated twice and ends with that schema too. Both stores.

"Before" is sluice's history as tests/data/migrations_before_split.txt holds it
(tests/migration_history.py); the schema is compared as each store's catalog says it:
every table, column (type, NOT NULL, default, in order), index, key, CHECK and
reference.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.app.assembly import create_app, default_apps
from sluice.app.loading import load_apps
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config, load_config
from sluice.events import utcnow
from sluice.projections.runtime import fresh_events
from sluice.store import Store, migrations
from sluice.store.postgres import PostgresStore
from sluice.store.sqlite import SqliteStore
from sluice.streams.messages import Delivery, Message
from tests.api.helpers import user_token
from tests.databases import Databases
from tests.link_helpers import add_link, add_user
from tests.migration_history import (
    LINKS_STATS_STEPS,
    SPLIT,
    SPLIT_APPS,
    migrate_as_before_split,
    migrations_before_split,
    release_3_steps,
    since_split,
    split_owners,
    steps_before_split,
)

Opened = SqliteStore | PostgresStore
Opener = Callable[[str], Awaitable[Opened]]

_SQLITE = (
    "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    " ORDER BY type, name"
)
_SQLITE_COLUMNS = (
    'SELECT m.name, c.cid, c.name, c.type, c."notnull", c.dflt_value, c.pk FROM sqlite_master'
    " AS m, pragma_table_xinfo(m.name) AS c WHERE m.type = 'table'"
    " AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, c.cid"
)
_PG_COLUMNS = (
    "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, column_default,"
    " is_identity FROM information_schema.columns WHERE table_schema = current_schema()"
    " ORDER BY table_name, ordinal_position"
)
_PG_INDEXES = (
    "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
    " ORDER BY tablename, indexname"
)
_PG_CONSTRAINTS = (
    "SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid)"
    " FROM pg_constraint WHERE connamespace = current_schema()::regnamespace"
    " ORDER BY 1, 2"
)


async def catalog(store: Store) -> set[tuple[Any, ...]]:
    """The schema as the store's catalog says it: one row per column (with its place),
    index and constraint, each tagged with its kind; two databases compare by it."""
    if store.dialect.name == "postgres":
        queries = {"column": _PG_COLUMNS, "index": _PG_INDEXES, "constraint": _PG_CONSTRAINTS}
        return {(kind, *row) for kind, sql in queries.items() for row in await store.fetchall(sql)}
    # A table's or index's SQL as SQLite keeps it (ALTERs rewrite it): its keys, CHECKs,
    # references and WITHOUT ROWID; whitespace aside, as the steps' indentation changed.
    schema = {
        (kind, name, table, sql and " ".join(str(sql).split()))
        for kind, name, table, sql in await store.fetchall(_SQLITE)
    }
    return schema | {("column", *row) for row in await store.fetchall(_SQLITE_COLUMNS)}


def differences(wanted: set[tuple[Any, ...]], got: set[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """What one catalog has and the other lacks (nothing: the same schema)."""
    return {
        "missing": sorted(wanted - got, key=repr),
        "extra": sorted(got - wanted, key=repr),
    }


SAME: dict[str, list[Any]] = {"missing": [], "extra": []}


async def history(store: Store) -> list[tuple[Any, ...]]:
    """sluice's own steps recorded: (version, name)."""
    return await store.fetchall("SELECT version, name FROM schema_migrations ORDER BY version")


async def app_steps(store: Store) -> list[tuple[str, int]]:
    rows = await store.fetchall("SELECT owner, version FROM app_migrations ORDER BY 1, 2")
    return [(str(owner), int(version)) for owner, version in rows]


@pytest.fixture
def postgres_databases(store_kind: str, request: pytest.FixtureRequest) -> Databases | None:
    """The session's PostgreSQL databases, when this test runs on PostgreSQL (started
    outside the test's event loop)."""
    return request.getfixturevalue("databases") if store_kind == "postgres" else None


@pytest.fixture
async def open_empty(tmp_path: Path, postgres_databases: Databases | None) -> AsyncIterator[Opener]:
    """``await open_empty(name)``: a new empty database of this test's store kind, opened
    without migrating (SQLite: a file under tmp_path; PostgreSQL: a database of its own).
    Each is closed, and dropped, after the test."""
    opened: list[Opened] = []
    made: list[str] = []

    async def open_one(name: str) -> Opened:
        if postgres_databases is None:
            store: Opened = await SqliteStore.open(tmp_path / name / "sluice.db", migrate=False)
        else:
            database, url = postgres_databases.take(template="template0")
            made.append(database)
            store = await PostgresStore.open(url, pool_size=2, migrate=False)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()
    for database in made:
        assert postgres_databases is not None
        postgres_databases.finished(database)


async def new_database(open_empty: Opener) -> Opened:
    store = await open_empty("new")
    await store.migrate(default_apps().migrations)
    return store


def test_every_step_of_the_split_apps_replaces_steps_of_sluices_history() -> None:
    """And each moved table's step in sluice's history is there still (possibly empty),
    with its number and name: a database made before the split records nothing new."""
    before = {(version, name) for version, name, _ in migrations_before_split()}
    assert {(v, name) for v, name, _ in migrations.MIGRATIONS if v <= SPLIT} == before
    versions = {version for version, _ in before}
    split = [step for step in default_apps().migrations if step.owner in split_owners()]
    assert {step.owner for step in split} == {*SPLIT_APPS, "projection:link-stats"}
    for step in split:
        assert step.replaces and set(step.replaces) <= versions, step


def test_the_versions_moved_out_are_those_the_built_in_apps_replace() -> None:
    replaced = {v for step in default_apps().migrations for v in step.replaces}
    assert replaced == migrations.MOVED_OUT


@pytest.mark.parametrize("first", ["articles", "accounts", "links,accounts"])
async def test_an_app_loaded_after_the_database_was_made_without_it_gets_its_tables(
    open_empty: Opener, first: str
) -> None:
    """A deployment started with some apps (``SLUICE_APPS=articles``) ran sluice's steps
    without the other apps' tables; when it loads them later, their steps run, although
    the versions they replace were applied."""
    store = await open_empty("partial")
    await store.migrate(load_apps(load_config({"SLUICE_APPS": first})).migrations)
    applied = await store.migrate(default_apps().migrations)
    assert "links:1" in applied or "links" in first
    assert "reminders:1" in applied
    new = await new_database(open_empty)
    assert differences(await catalog(new), await catalog(store)) == SAME
    assert await app_steps(store) == await app_steps(new)


async def test_a_new_database_has_the_schema_it_had_before_the_split(
    open_empty: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = await open_empty("old")
    await migrate_as_before_split(old, monkeypatch)
    # sluice's own steps since the split (none of them an app's) run on it as on any.
    assert await old.migrate([]) == since_split()
    new = await new_database(open_empty)
    assert differences(await catalog(old), await catalog(new)) == SAME
    assert await history(new) == await history(old)


async def test_a_database_made_before_the_split_applies_nothing_and_keeps_working(
    make_config: Callable[..., Config],
    empty_database_url: str | None,
    aiohttp_client: Callable[..., Awaitable[Any]],
    open_empty: Opener,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = make_config(database_url=empty_database_url or "")
    if config.postgres:
        old: Opened = await PostgresStore.open(config.database_url, pool_size=2, migrate=False)
    else:
        old = await SqliteStore.open(config.sqlite_path, migrate=False)
    try:
        await migrate_as_before_split(old, monkeypatch)
        # Every app step recorded as done; sluice's own since the split run.
        assert await old.migrate(default_apps().migrations) == since_split()
        every = sorted((step.owner, step.version) for step in default_apps().migrations)
        assert await app_steps(old) == every
        new = await new_database(open_empty)
        assert differences(await catalog(new), await catalog(old)) == SAME
    finally:
        await old.close()

    # The API on it: an account, a token, a link, a reminder, each in the moved tables.
    client = await aiohttp_client(create_app(config))
    auth = await user_token(client)
    made = await client.post("/v1/links", json={"url": "https://example.org/"}, headers=auth)
    assert made.status == 201, await made.text()
    code = (await made.json())["code"]
    assert (await client.get(f"/v1/links/{code}", headers=auth)).status == 200
    reminder = {"cron": "0 30 8 * * MON-FRI", "timezone": "Europe/Berlin", "text": "stand-up"}
    made = await client.post("/v1/reminders", json=reminder, headers=auth)
    assert made.status == 201, await made.text()
    listed = await client.get("/v1/reminders", headers=auth)
    assert listed.status == 200, await listed.text()


# A release at each of these versions of sluice's history: before the accounts' first
# table, between two steps of one app, in the middle of a step split between owners
# (7, 12, 28), and the last one before the split.
@pytest.mark.parametrize("upto", [3, 7, 11, 12, 19, 26, 27, 29])
async def test_a_database_from_an_earlier_release_ends_with_the_new_schema(
    open_empty: Opener, monkeypatch: pytest.MonkeyPatch, upto: int
) -> None:
    old = await open_empty("old")
    await migrate_as_before_split(old, monkeypatch, upto=upto)
    applied = await old.migrate(default_apps().migrations)
    new = await new_database(open_empty)
    assert differences(await catalog(new), await catalog(old)) == SAME
    assert await history(old) == await history(new)
    assert await app_steps(old) == await app_steps(new)
    # What ran: sluice's steps after upto, and each app step replacing any of them (or
    # none); the others were recorded as done.
    ran = [f"sluice:{v}" for v, _, _ in sorted(migrations.MIGRATIONS) if v > upto] + [
        f"{step.owner}:{step.version}"
        for step in default_apps().migrations
        if step not in steps_before_split(upto)
        and not (step.replaces and max(step.replaces) <= upto)
    ]
    assert applied == ran


def _visit(event: LinkVisited) -> Delivery:
    fields = {"event_id": event.event_id}
    return Delivery(Message("sluice:visits", "1-1", fields, 1), event)


async def _project(store: Store, *events: LinkVisited) -> None:
    """Apply ``events`` as the link-stats worker does: each once, by its processed row."""
    projection = default_apps().projections["link-stats"]
    async with store.transaction() as tx:
        fresh = await fresh_events(tx, projection, [_visit(e) for e in events])
        await projection.apply(fresh, tx, "", load_config({}))


async def test_a_release_3_database_keeps_its_link_stats_and_counts_a_visit_once(
    open_empty: Opener,
) -> None:
    """Release 3's links app made the link-stats tables (its steps 2, 12 and 14); the
    projection's schema steps make them now, and take them over: none runs there, the
    counts stay, and a visit counted before the upgrade and redelivered after it is not
    counted again."""
    old = await open_empty("release-3")
    await old.migrate(release_3_steps())
    await add_user(old)
    await add_link(old, "kept", "https://example.org/")
    first, second = (LinkVisited(code="kept", visitor=v, occurred_at=utcnow()) for v in "ab")
    await _project(old, first)

    assert await old.migrate(default_apps().migrations) == []  # every step: as done
    new = await new_database(open_empty)
    assert differences(await catalog(new), await catalog(old)) == SAME
    moved = [(step.owner, step.version) for step in LINKS_STATS_STEPS]
    assert await app_steps(old) == sorted([*await app_steps(new), *moved])

    await _project(old, first, second)  # the first again: a redelivery
    totals = "SELECT total, unique_visitors FROM link_stats WHERE code = 'kept'"
    assert await old.fetchall(totals) == [(2, 2)]
