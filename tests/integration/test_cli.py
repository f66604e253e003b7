"""The console commands as a user runs them: ``sluice migrate``, ``status``, ``replay``.

Each is the real ``python -m sluice`` process on this test's data dir and Redis;
what it prints and its exit status are what is checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

from sluice.app.assembly import default_apps, open_store
from sluice.app.testing import Child, sluice_command, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.process.resources import Resources
from sluice.store.migrations import MIGRATIONS
from tests.app_helpers import AppDir

CODE = "cli1"
SHOP = """
from sluice.app import App

app = App("shop")
app.migration(1, "orders", "CREATE TABLE shop_orders (id TEXT PRIMARY KEY)")
"""


async def status(config: Config) -> dict[str, Any]:
    done = await sluice_command(config, "status", "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_version_is_the_installed_distributions() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, f"sluice {metadata.version('sluice')}\n")


async def test_migrate_says_what_it_applied_and_when_there_was_nothing(
    make_config: Callable[..., Config], empty_database_url: str | None, app_dir: AppDir
) -> None:
    config = make_config(database_url=empty_database_url or "")
    done = await sluice_command(config, "migrate")
    assert done.returncode == 0, done.stderr
    store = await open_store(config)
    try:
        rows = await store.fetchall("SELECT version FROM schema_migrations ORDER BY version")
        app_rows = await store.fetchall("SELECT owner, version FROM app_migrations")
    finally:
        await store.close()
    assert [row[0] for row in rows] == sorted(version for version, _, _ in MIGRATIONS)
    # and the apps' steps, which hold most tables (sluice/builtin/<app>/migrations.py)
    steps = default_apps().migrations
    assert sorted(app_rows) == sorted((step.owner, step.version) for step in steps)
    # A fresh database: said so, with every step it took, by owner.
    [said] = done.stdout.splitlines()
    assert said.startswith(
        f"database created: {len(rows) + len(app_rows)} migration steps applied ("
    )
    assert f"sluice:1-{rows[-1][0]}" in said
    for owner in {step.owner for step in steps}:
        assert f" {owner}:1" in said, owner

    again = await sluice_command(config, "migrate")  # nothing left to apply: said so, still fine
    assert (again.returncode, again.stdout) == (0, "database is up to date: nothing to apply\n")

    app_dir.module("shop_app", SHOP)  # an app added later, on purpose: its step alone
    with_shop = make_config(database_url=empty_database_url or "", apps="default,shop_app")
    refused = await sluice_command(with_shop, "migrate")  # not by accident
    assert refused.returncode == 2 and "it loads shop" in refused.stderr, refused.stderr
    added = await sluice_command(with_shop, "migrate", "--change-apps")
    assert (added.returncode, added.stdout) == (
        0,
        "database migrated: 1 migration step applied (shop:1)\n"
        "the deployment's apps: accounts, links, reminders, articles, operations, shop\n",
    ), added.stderr


async def test_status_shows_the_relay_backlog_and_then_the_stream(
    config: Config, resources: Resources, spawn: Callable[..., Child]
) -> None:
    async with resources.store.transaction() as tx:
        await tx.append(*(LinkVisited(code=CODE, visitor=f"v{i}") for i in range(7)))
    before = await status(config)
    assert (before["relay_backlog"], before["streams"]) == (7, [])
    spawn("relay")
    visits = resources.keys.stream("visits")

    async def published() -> bool:
        return int(await resources.redis.xlen(visits)) == 7

    await wait_for(published)
    after = await status(config)
    assert after["relay_backlog"] == 0
    streams = {s["stream"]: s for s in after["streams"]}
    assert streams[visits]["length"] == 7
    # The relay made every registered group before publishing: no worker has read yet.
    assert {g["group"]: g["lag"] for g in streams[visits]["groups"]} == {
        "link-stats": 7,
        "webhooks": 7,
    }
    assert all(s["length"] == 0 for name, s in streams.items() if name != visits)
    text = await sluice_command(config, "status")
    assert "relay backlog: 0" in text.stdout and f"{visits}  length=7" in text.stdout
    assert "flow control" not in text.stdout  # no entry waits for its turn


async def test_replay_rebuilds_link_stats_and_refuses_an_unknown_projection(
    config: Config, resources: Resources
) -> None:
    async with resources.store.transaction() as tx:
        await tx.append(*(LinkVisited(code=CODE, visitor=f"v{i % 3}") for i in range(9)))
    done = await sluice_command(config, "replay", "link-stats", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("link-stats: rebuilt from 9 events")
    row = await resources.store.fetchone("SELECT total FROM link_stats WHERE code = ?", (CODE,))
    assert row is not None and row[0] == 9
    unknown = await sluice_command(config, "replay", "nope")
    assert unknown.returncode == 2
    assert (
        f"unknown projection 'nope'; known: {', '.join(sorted(default_apps().projections))}"
        in unknown.stderr
    )


async def test_a_bad_setting_stops_a_command_with_the_variable_named(config: Config) -> None:
    done = await sluice_command(config, "status", SLUICE_LOG_LEVEL="verbose")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "sluice: SLUICE_LOG_LEVEL must be one of debug, info, warning, error, critical"
    )
