"""The migration engine: sluice's schema history, then each loaded app's, applied once.

sluice's own steps (``sluice.store.migrations.MIGRATIONS``) are numbered in one
sequence and recorded in ``schema_migrations``. An app's steps are numbered per owner
(the app, or ``projection:<name>`` for a projection's tables) and recorded in
``app_migrations``; they run after sluice's, owner by owner in the order the apps were
loaded (an app after the apps it requires). Every step is DDL written once, in
SQLite's words, which each backend's ``execute_script`` says in its own.

A step may replace steps of sluice's history: tables that moved from sluice into an
app keep their history. Such a step is recorded as done without running when every
version it replaces had been applied, with those tables, before this start (the
database was made by a release in which sluice owned them); otherwise it runs. The set
of versions applied is read once, before anything runs, so a sluice step rewritten
without the moved tables cannot make a fresh database skip them. And a version run
without them (``migrations.MOVED_OUT``, applied by this release or a later one) is
recorded in ``schema_migrations_moved``: it never counts as having made the app's
tables, so a database created with some apps (``SLUICE_APPS=articles``) gets another
app's tables when that app is first loaded, months later.

The caller makes the transaction exclusive (SQLite's write lock, PostgreSQL's advisory
lock), so processes starting together apply each step once.

Tables may move between an app's owners too: a step naming other owners' steps in
``replaces_steps`` (a projection's schema taking the tables its app's migrations made)
is recorded as done without running when they all were, before this start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.errors import SluiceError
from sluice.events import utcnow
from sluice.store import migrations
from sluice.store.app_set import keep_app_set

if TYPE_CHECKING:
    from sluice.store.base import Tx

CORE = "sluice"


class MigrationFailed(SluiceError):
    """A step the database refused: whose step, which, and the database's own words.
    Nothing of the migration run is committed (it is one transaction)."""


@dataclass(frozen=True)
class Migration:
    """One step of an app's schema; see the module docstring for ``replaces``."""

    owner: str
    version: int
    name: str
    sql: str
    replaces: tuple[int, ...] = ()
    # Steps of other owners, (owner, version), that made these tables before this owner
    # held them (an app's migrations, before its projection's schema took their tables):
    # when they are all recorded as done, so is this step, without running.
    replaces_steps: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Schema:
    """What a store is opened with beside sluice's own tables: the apps' ``steps``, in
    the apps' order, and the apps' names, the deployment's app set (checked, or recorded
    the first time). ``apps`` None: no check (a copy's target, a test's bare store)."""

    steps: tuple[Migration, ...] = ()
    apps: tuple[str, ...] | None = None


async def apply_migrations(
    tx: Tx,
    steps: Sequence[Migration] = (),
    *,
    apps: Sequence[str] | None = None,
    change_apps: bool = False,
) -> list[str]:
    """Apply the steps ``tx``'s database lacks: sluice's, then ``steps`` in order; then,
    given the names of the ``apps`` that made the steps, record or check them as the
    deployment's (``sluice.store.app_set``; ``change_apps`` records another set). The
    steps applied, as ``owner:version`` (``sluice:29``)."""
    await tx.execute_script(
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    await tx.execute_script(
        "CREATE TABLE IF NOT EXISTS schema_migrations_moved (version INTEGER PRIMARY KEY)"
    )
    # The deployment's apps (sluice.store.app_set), kept by every database alike.
    await tx.execute_script(
        "CREATE TABLE IF NOT EXISTS deployment_apps"
        " (name TEXT PRIMARY KEY, recorded_at TEXT NOT NULL)"
    )
    before = {row[0] for row in await tx.fetchall("SELECT version FROM schema_migrations")}
    moved = {row[0] for row in await tx.fetchall("SELECT version FROM schema_migrations_moved")}
    applied: list[str] = []
    for version, name, script in sorted(migrations.MIGRATIONS):
        if version in before:
            continue
        if script.strip():  # a step whose tables moved into an app is empty now
            await _run(tx, f"sluice's migration {version} ({name!r})", script)
        await tx.execute(
            "INSERT INTO schema_migrations VALUES (?, ?, ?)",
            (version, name, utcnow().isoformat()),
        )
        if version in migrations.MOVED_OUT:
            await tx.execute("INSERT INTO schema_migrations_moved VALUES (?)", (version,))
        applied.append(f"{CORE}:{version}")
    if steps:
        # Versions that made the apps' tables here: applied before, and in their full form.
        applied += await _apply_app_steps(tx, steps, before - moved)
    if apps is not None:
        await keep_app_set(tx, apps, change=change_apps)
    return applied


async def _apply_app_steps(tx: Tx, steps: Sequence[Migration], before: set[int]) -> list[str]:
    await tx.execute_script(
        "CREATE TABLE IF NOT EXISTS app_migrations (owner TEXT NOT NULL, version INTEGER"
        " NOT NULL, name TEXT NOT NULL, applied_at TEXT NOT NULL, PRIMARY KEY (owner, version))"
    )
    rows = await tx.fetchall("SELECT owner, version FROM app_migrations")
    done = {(str(owner), int(version)) for owner, version in rows}
    applied: list[str] = []
    for step in steps:
        if (step.owner, step.version) in done:
            continue
        if not _made_before(step, before, done):
            await _run(tx, _whose(step), step.sql)
            applied.append(f"{step.owner}:{step.version}")
        await tx.execute(
            "INSERT INTO app_migrations VALUES (?, ?, ?, ?)",
            (step.owner, step.version, step.name, utcnow().isoformat()),
        )
    return applied


def _made_before(step: Migration, before: set[int], done: set[tuple[str, int]]) -> bool:
    """Whether the steps ``step`` replaces had made its tables before this start: sluice's
    versions (``before``), or other owners' steps (``done``)."""
    if step.replaces and set(step.replaces) <= before:
        return True
    return bool(step.replaces_steps) and set(step.replaces_steps) <= done


def _whose(step: Migration) -> str:
    kind, _, name = step.owner.partition(":")
    if kind == "projection" and name:
        return f"projection {name!r}, schema step {step.version} ({step.name!r})"
    return f"app {step.owner!r}, migration {step.version} ({step.name!r})"


async def _run(tx: Tx, whose: str, script: str) -> None:
    try:
        await tx.execute_script(script)
    except Exception as exc:  # the database's answer, named with the step it refused
        raise MigrationFailed(
            f"{whose} failed, nothing of this migration run was applied:"
            f" {type(exc).__name__}: {exc}"
        ) from exc
