"""``sluice copy-store``: a deployment moves between SQLite and PostgreSQL with one command.

The copy must hold every row of every table exactly (the event history with its
``seq`` numbers, state, positions, projections), leave the target serving as the
source did, refuse a target that holds anything and then write nothing to it,
and stay consistent while the source is still written to.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from sluice.app.assembly import all_tasks, create_app, default_apps
from sluice.app.testing import child_env, wait_for
from sluice.builtin.links.events import LinkCreated, LinkVisited
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.events import decode, utcnow
from sluice.history.reader import read_history
from sluice.http.app_keys import STORE
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION, Relay
from sluice.scheduler.runner import Runner
from sluice.store.base import StoredEvent
from sluice.store.copy import CopyError, CopyStore, copy_store, quoted
from sluice.store.postgres import PostgresStore
from sluice.store.postgres_tx import PostgresTx
from sluice.store.sqlite import SqliteStore
from tests.databases import TEMPLATE, Databases, new_database
from tests.engine_app import Pinged, registered
from tests.integration.archive_helpers import make_old, run_archive
from tests.link_helpers import CHROME, FIREFOX, GOOGLEBOT, OWNER, add_link, add_user

registered()  # the engine's test app (tests/engine_app): its pings are bulk history here
STEPS = default_apps().migrations  # the default apps' migrations, as `sluice copy-store`

Client = TestClient[Any, Any]
AiohttpClient = Callable[..., Awaitable[Client]]
Tables = dict[str, list[tuple[Any, ...]]]
# A generation table an interrupted ``sluice replay`` left behind: never copied.
LEFTOVER = "link_stats__rdeadbeef"
# What ``traffic`` makes: redirects served, views counted.
VISITS, VIEWS = 7, 7


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(code_pool_target=300)


@pytest.fixture
def empty_database(databases: Databases) -> Iterator[Callable[..., str]]:
    """Make a PostgreSQL database (by default as ``createdb`` makes it: nothing in it)."""
    postgres_server = databases.server
    names: list[str] = []

    def make(template: str = "template0") -> str:
        name, url = new_database(postgres_server, template=template)
        names.append(name)
        return url

    yield make
    for name in names:
        postgres_server.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def sluice(config: Config, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "sluice", *args],
        env=child_env(config),
        capture_output=True,
        text=True,
        timeout=90,
    )


async def open_url(url: str) -> CopyStore:
    if url.startswith("sqlite:///"):
        return await SqliteStore.open(Path(url.removeprefix("sqlite:///")), migrate=False)
    return await PostgresStore.open(url, pool_size=2, migrate=False)


async def everything(url: str) -> Tables:
    """Every row of every table but the migrations' own, sorted: what a copy reproduces."""
    store = await open_url(url)
    try:
        async with store.snapshot() as tx:
            columns: dict[str, list[str]] = {}
            for table, column, _ in await tx.table_columns():
                columns.setdefault(table, []).append(column)
            tables: Tables = {}
            for name, names in sorted(columns.items()):
                if name not in ("schema_migrations", "schema_migrations_moved", "app_migrations"):
                    select = ", ".join(quoted(c) for c in sorted(names))
                    rows = await tx.fetchall(f"SELECT {select} FROM {quoted(name)}")
                    tables[name] = sorted(rows, key=repr)
    finally:
        await store.close()
    return tables


async def register(client: Client, email: str) -> dict[str, str]:
    user = {"email": email, "password": "correct horse", "name": email.split("@")[0]}
    assert (await client.post("/v1/users", json=user)).status == 201
    response = await client.post("/v1/tokens", json=user)
    return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def new_link(client: Client, auth: dict[str, str], **body: str) -> str:
    response = await client.post(
        "/v1/links", json={"url": "https://example.org/a", **body}, headers=auth
    )
    assert response.status == 201, await response.text()
    code: str = (await response.json())["code"]
    return code


async def traffic(client: Client, resources: Resources) -> dict[str, Any]:
    """Users, a task run, links and their visits, article views, a reminder; the number of
    visits and views the projections must reach."""
    ada = await register(client, "ada@example.org")
    bob = await register(client, "bob@example.org")
    task = all_tasks(resources.config)["refill-code-pool"]
    runner = Runner(resources, holder="test")
    assert (await runner.execute(await runner.begin(task, "manual", utcnow()))).status == (
        "succeeded"
    )
    codes = [await new_link(client, ada), await new_link(client, ada, alias="moved-1")]
    await new_link(client, bob, alias="bobs-1")
    for i, agent in enumerate([CHROME, FIREFOX, GOOGLEBOT, CHROME, CHROME]):
        headers = {"User-Agent": agent, "Referer": f"https://ref{i % 2}.example/x"}
        for code in codes[: 1 + i % 2]:
            response = await client.get(f"/{code}", headers=headers, allow_redirects=False)
            assert response.status == 302
    for i in range(7):
        body = {"viewer": f"viewer-{i % 5}"}
        assert (await client.post(f"/v1/articles/art-{i % 2}/views", json=body)).status == 202
    reminder = {"cron": "0 30 8 * * MON-FRI", "timezone": "Europe/Berlin", "text": "stand-up"}
    assert (await client.post("/v1/reminders", json=reminder, headers=ada)).status == 201
    return {"codes": codes, "auth": ada}


async def answers(client: Client, codes: list[str], auth: dict[str, str]) -> list[Any]:
    """What the stats, articles, links and reminders routes say, less ``as_of``."""
    today = utcnow().date().isoformat()
    paths = [f"/v1/links/{code}/stats?from={today}&to={today}" for code in codes]
    paths += ["/v1/articles/art-0", "/v1/articles/art-1", "/v1/articles/top?period=day"]
    paths += ["/v1/links", "/v1/reminders", "/v1/me"]
    bodies = []
    for path in paths:
        response = await client.get(path, headers=auth)
        assert response.status == 200, (path, await response.text())
        body = await response.json()
        if isinstance(body, dict):
            body.pop("as_of", None)
        bodies.append(body)
    return bodies


@pytest.mark.stores("sqlite")
async def test_a_deployment_moves_from_sqlite_to_postgresql_with_every_row_and_answer(
    aiohttp_client: AiohttpClient,
    config: Config,
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    empty_database: Callable[..., str],
) -> None:
    source = await aiohttp_client(create_app(config))
    start_relay()
    for group in ("link-stats", "article-views", "mail"):
        start_worker(group)
    made = await traffic(source, resources)
    store = resources.store

    async def drained() -> bool:
        done = await store.fetchone(
            "SELECT (SELECT SUM(total) FROM link_stats), (SELECT SUM(views) FROM article_views),"
            " (SELECT COUNT(*) FROM mail_sends WHERE state = 'sent')"
        )
        relayed = await store.position(POSITION) == await store.max_seq()
        return relayed and done == (VISITS, VIEWS, 2)

    await wait_for(drained)
    async with store.transaction() as tx:
        await tx.execute_script(f"CREATE TABLE {LEFTOVER} (code TEXT PRIMARY KEY)")
        await tx.execute(f"INSERT INTO {LEFTOVER} VALUES ('half-built')")
    before = await answers(source, made["codes"], made["auth"])
    head = await store.max_seq()

    target = empty_database()  # as `createdb` leaves it
    done = await sluice(config, "copy-store", "--to", target, "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "counts checked" in done.stdout
    assert f"skipped {LEFTOVER}: left over from an interrupted `sluice replay`" in done.stdout

    copied, original = await everything(target), await everything(config.database_url)
    assert LEFTOVER not in copied
    del original[LEFTOVER]
    assert copied == original
    for table in (
        "events",
        "users",
        "tokens",
        "links",
        "code_pool",
        "link_stats",
        "link_visitors",
        "article_views",
        "reminders",
        "task_runs",
        "mail_sends",
        "positions",
    ):
        assert copied[table], f"{table} was empty: the traffic did not reach it"

    moved = await aiohttp_client(create_app(make_config(database_url=target)))
    assert await answers(moved, made["codes"], made["auth"]) == before
    code = await new_link(moved, made["auth"])  # from the copied code pool
    assert moved.app is not None
    [event] = await moved.app[STORE].events_after(head, 10)
    created = decode(event.payload)
    assert event.seq == head + 1
    assert isinstance(created, LinkCreated) and created.code == code


@pytest.mark.stores("sqlite")
async def test_a_target_that_holds_rows_is_refused_and_left_as_it_was(
    config: Config, resources: Resources, empty_database: Callable[..., str]
) -> None:
    await add_link(resources.store, "kept-1", "https://example.org/kept")
    target = empty_database(TEMPLATE)  # migrated, as `sluice migrate` leaves it
    store = await PostgresStore.open(target, pool_size=1)
    try:
        await add_user(store, "someone-else", "someone-elses-token-0123")
    finally:
        await store.close()
    before = await everything(target)

    done = await sluice(config, "copy-store", "--to", target, "--no-progress")
    assert done.returncode == 1, done.stdout
    assert "the target is not empty (tokens, users hold rows)" in done.stderr
    assert "Nothing was written" in done.stderr
    assert await everything(target) == before


@pytest.mark.stores("sqlite")
async def test_nothing_is_written_to_a_foreign_database_or_for_a_newer_source(
    config: Config, resources: Resources, empty_database: Callable[..., str]
) -> None:
    foreign = empty_database()
    store = await PostgresStore.open(foreign, pool_size=1, migrate=False)
    try:
        async with store.transaction() as tx:
            await tx.execute("CREATE TABLE invoices (id TEXT PRIMARY KEY)")
            await tx.execute("INSERT INTO invoices VALUES ('2024-001')")
    finally:
        await store.close()
    with pytest.raises(CopyError, match=r"not empty \(invoices hold rows\)"):
        await copy_store(config.database_url, foreign, progress=False, steps=STEPS)
    assert await everything(foreign) == {"invoices": [("2024-001",)]}  # no sluice table

    async with resources.store.transaction() as tx:  # as a newer sluice would have it
        await tx.execute("INSERT INTO schema_migrations VALUES (999, 'from the future', '')")
    target = empty_database()
    with pytest.raises(CopyError, match=r"version\(s\) 999, newer than this sluice knows"):
        await copy_store(config.database_url, target, progress=False, steps=STEPS)
    assert await everything(target) == {}


@pytest.mark.stores("sqlite")
async def test_a_copy_that_loses_a_row_fails_naming_the_table_and_commits_nothing(
    config: Config,
    resources: Resources,
    empty_database: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await add_link(resources.store, "lost-1", "https://example.org/lost")
    write = PostgresTx.copy_rows

    async def lossy(tx: PostgresTx, table: str, columns: Any, rows: Any) -> None:
        await write(tx, table, columns, rows[:-1] if table == "events" else rows)

    monkeypatch.setattr(PostgresTx, "copy_rows", lossy)
    target = empty_database()
    with pytest.raises(CopyError, match="table events: 1 rows in the source, 1 copied, 0 in the"):
        await copy_store(config.database_url, target, progress=False, steps=STEPS)
    assert not any((await everything(target)).values())


@pytest.mark.stores("postgres")
async def test_postgresql_moves_to_sqlite_page_by_page(
    config: Config, resources: Resources, tmp_path: Path
) -> None:
    store = resources.store
    await add_link(store, "pg-1", "https://example.org/pg")
    async with store.transaction() as tx:
        await tx.append(*(Pinged(source=f"a{i % 3}", note=f"v{i}") for i in range(40)))
        await tx.execute(
            "INSERT INTO jobs (id, kind, owner_id, code, status, created_at, snapshot_seq,"
            " trace_id) VALUES ('job-1', 'visits-csv', ?, 'pg-1', 'succeeded', '', 41, 't')",
            (OWNER,),
        )
        for part in range(3):  # rows large enough that a batch holds few of them
            await tx.execute(
                "INSERT INTO export_chunks (job_id, first_byte, data) VALUES ('job-1', ?, ?)",
                (part * 300_000, bytes([part]) * 300_000),
            )
    await store.set_position(POSITION, 17)
    target = f"sqlite:///{tmp_path / 'moved' / 'sluice.db'}"

    result = await copy_store(config.database_url, target, batch=7, progress=False, steps=STEPS)
    assert (result.tables["events"], result.tables["export_chunks"]) == (41, 3)
    assert await everything(target) == await everything(config.database_url)
    moved = await SqliteStore.open(Path(target.removeprefix("sqlite:///")))
    try:
        assert await moved.position(POSITION) == 17
        async with moved.transaction() as tx:
            await tx.append(Pinged(source="a0", note="after the move"))
        assert await moved.max_seq() == await store.max_seq() + 1
    finally:
        await moved.close()


@pytest.mark.stores("sqlite")
async def test_a_source_still_written_is_copied_as_one_snapshot(
    config: Config, resources: Resources, empty_database: Callable[..., str]
) -> None:
    """Each write commits an event and the writer's position together; the copy holds
    a prefix of the history and the position that goes with it."""
    store = resources.store
    stop = asyncio.Event()

    async def write(n: int, events: int = 1) -> None:
        async with store.transaction() as tx:
            await tx.append(*(Pinged(source="busy", note=f"v{n}") for _ in range(events)))
            await tx.execute(
                "INSERT INTO positions (name, seq) VALUES ('writer', ?)"
                " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq",
                (n,),
            )

    async def keep_writing() -> int:
        n = 0
        while not stop.is_set():
            n += 1
            await write(n)
            await asyncio.sleep(0.001)
        return n

    await write(0, events=2000)
    writer = asyncio.ensure_future(keep_writing())
    target = empty_database()
    try:
        result = await copy_store(
            config.database_url, target, batch=50, progress=False, steps=STEPS
        )
    finally:
        stop.set()
        written = await writer
    copied = await everything(target)
    source = await everything(config.database_url)
    events = result.tables["events"]
    assert 2000 <= events < 2000 + written  # the writer went on after the snapshot
    seq = sorted(StoredEvent.__struct_fields__).index("seq")  # `everything` sorts columns
    assert copied["events"] == [row for row in source["events"] if row[seq] <= events]
    assert copied["positions"] == [("writer", events - 2000)]


@pytest.mark.stores("sqlite")
async def test_an_archived_deployment_moves_with_its_segments_and_the_same_history(
    config: Config, resources: Resources, empty_database: Callable[..., str]
) -> None:
    store = resources.store
    for start in range(0, 2_000, 500):
        async with store.transaction() as tx:
            await tx.append(
                *(LinkVisited(code="c", visitor=f"x{i}") for i in range(start, start + 500))
            )
    head = await store.max_seq()
    await make_old(store, head)
    await store.set_position(POSITION, head)
    assert len(await run_archive(store, segment_events=600)) == 4  # 600, 600, 600, 199
    history = [row async for chunk in read_history(store, ("LinkVisited",)) for row in chunk]
    assert len(history) == 2_000

    target = empty_database()
    done = await sluice(config, "copy-store", "--to", target, "--no-progress")
    assert done.returncode == 0, done.stderr
    moved = await PostgresStore.open(target, pool_size=2)
    try:
        copied = [row async for chunk in read_history(moved, ("LinkVisited",)) for row in chunk]
        assert copied == history
        assert await moved.max_seq() == head
        async with moved.transaction() as tx:  # numbers go on after the archived ones
            await tx.append(LinkVisited(code="c", visitor="new"))
        [event] = await moved.events_after(head, 10)
        assert event.seq == head + 1
    finally:
        await moved.close()
