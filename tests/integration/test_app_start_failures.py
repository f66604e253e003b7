"""An app that cannot start stops the process at once, non-zero, with one line naming the
app and what is wrong: a migration the database refuses, a table that is another owner's,
an app the loader refuses. Never a hang, never a traceback in place of the message
(docs/guides/write-an-app.md, "What is checked, and when")."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sluice.app.assembly import open_store
from sluice.app.testing import sluice_command
from sluice.config import Config
from tests.app_helpers import AppDir

# Generous for a loaded machine: a hang is what this catches, not a slow start.
DEADLINE = 90.0

BROKEN_STEP = """
from sluice.app import App

app = App("shop")
app.migration(1, "orders", "CREATE TABLE shop_orders (id TEXT PRIMARY KEY)")
app.migration(2, "an index on nothing", "CREATE INDEX shop_nowhere_x ON shop_nowhere (x)")
"""

USERS = """
from sluice.app import App

app = App("shop")
app.migration(1, "users", "CREATE TABLE users (id TEXT PRIMARY KEY, email TEXT)")
"""

BAD_NAME = """
from sluice.app import App

app = App("Shop")
"""


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("sluice: ")]
    assert len(lines) == 1, stderr
    return lines[0]


async def test_a_failing_migration_step_ends_migrate_at_once_naming_app_step_and_error(
    app_dir: AppDir, make_config: Callable[..., Config]
) -> None:
    app_dir.module("shop_app", BROKEN_STEP)
    config = make_config(apps="default,shop_app")
    done = await sluice_command(config, "migrate", timeout=DEADLINE)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = _one_line(done.stderr)
    assert "app 'shop', migration 2 ('an index on nothing') failed" in line
    assert "shop_nowhere" in line  # the database's own words name what is missing
    assert "database is up to date" not in done.stdout
    # One transaction: step 1 was not kept either, and sluice's own steps are intact.
    store = await open_store(make_config())
    try:
        assert await store.fetchall("SELECT version FROM app_migrations WHERE owner = 'shop'") == []
        assert await store.fetchone("SELECT count(*) FROM users") == (0,)
    finally:
        await store.close()


async def test_an_app_table_named_as_sluice_s_is_refused_naming_both(
    app_dir: AppDir, make_config: Callable[..., Config]
) -> None:
    app_dir.module("shop_app", USERS)
    done = await sluice_command(make_config(apps="default,shop_app"), "migrate", timeout=DEADLINE)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = _one_line(done.stderr)
    assert "table 'users': app 'shop' creates it (migration 1 'users' of shop)" in line
    assert "and sluice (its migration 3) does too" in line


@pytest.mark.parametrize(
    "command", [("up",), ("api",), ("worker", "mail"), ("scheduler",), ("migrate",)]
)
async def test_an_app_the_loader_refuses_stops_every_process_kind_at_once(
    app_dir: AppDir, make_config: Callable[..., Config], command: tuple[str, ...]
) -> None:
    app_dir.module("shop_app", BAD_NAME)
    config = make_config(apps="default,shop_app")
    # With an admin token, `sluice up` reaches its processes without opening the store.
    done = await sluice_command(
        config, *command, timeout=DEADLINE, SLUICE_ADMIN_TOKEN="x" * 40, SLUICE_PORT="0"
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = _one_line(done.stderr)
    assert "SLUICE_APPS entry 'shop_app' failed to load: ValueError: app name 'Shop'" in line
    assert "shop_app.py:4" in line  # the line of the app that raised
