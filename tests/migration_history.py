"""The databases earlier releases made, for the tests of tables that moved into apps.

``tests/data/migrations_before_split.txt`` is ``sluice/store/migrations.py`` as it was
before the built-in apps held the migrations of their tables (commit 3cd6023): sluice's
history 1..29 with the tables of the accounts, links and reminders apps in it (the
articles app already held its own). Kept as text, loaded here as a module of its own,
so no test depends on what the current history says.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import pytest

from sluice.app.assembly import default_apps
from sluice.builtin.links.stats.schema import LINK_STATS_DDL, LINK_STATS_RANGES_DDL
from sluice.store import migrations
from sluice.store.migrate import Migration
from sluice.store.postgres import PostgresStore
from sluice.store.sqlite import SqliteStore

BEFORE_SPLIT = Path(__file__).parent / "data" / "migrations_before_split.txt"
# The last version of sluice's history before the split; the steps after it came later.
SPLIT = 29
# The apps whose steps the split gave them: each of their steps replaces a version of
# the history above. The articles app's steps (and their replaces) came before it.
SPLIT_APPS = ("accounts", "links", "reminders")


@functools.cache
def migrations_before_split() -> tuple[tuple[int, str, str], ...]:
    """``MIGRATIONS`` of the module as it was: (version, name, sql), in its order."""
    loader = importlib.machinery.SourceFileLoader("migrations_before_split", str(BEFORE_SPLIT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return tuple(module.MIGRATIONS)


def since_split() -> list[str]:
    """sluice's own steps after the split, as ``migrate`` says them when it runs them."""
    return [f"sluice:{v}" for v, _, _ in sorted(migrations.MIGRATIONS) if v > SPLIT]


def split_owners() -> set[str]:
    """The owners of the steps the split made (the apps', their projections')."""
    apps = [app for app in default_apps().apps if app.name in SPLIT_APPS]
    return {app.name for app in apps} | {f"projection:{p}" for app in apps for p in app.projections}


def steps_before_split(upto: int = SPLIT) -> list[Migration]:
    """The default apps' steps a release with sluice's history up to ``upto`` had: the
    articles app's, those whose replaced versions it had (a release before the articles
    app made the same tables in sluice's own steps)."""
    split = split_owners()
    return [
        step
        for step in default_apps().migrations
        if step.owner not in split and max(step.replaces, default=0) <= upto
    ]


async def migrate_as_before_split(
    store: SqliteStore | PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    *,
    upto: int = SPLIT,
    steps: Sequence[Migration] | None = None,
) -> list[str]:
    """Migrate ``store`` (opened with ``migrate=False``) as a release before the split
    did: sluice's history as it was, up to ``upto``, then ``steps`` (by default
    ``steps_before_split(upto)``). The steps applied, as ``migrate`` says them."""
    with monkeypatch.context() as patch:
        old = [m for m in migrations_before_split() if m[0] <= upto]
        patch.setattr(migrations, "MIGRATIONS", old)
        # Those releases ran every version whole: none is recorded as run without its
        # moved tables (schema_migrations_moved stays empty, as on such a database).
        patch.setattr(migrations, "MOVED_OUT", frozenset())
        return await store.migrate(steps_before_split(upto) if steps is None else steps)


# The links app's steps of release 3 that made the link-stats tables, which the
# projection's schema steps make since (sluice/builtin/links/stats/projection.py).
LINKS_STATS_STEPS = (
    Migration("links", 2, "link statistics projection", LINK_STATS_DDL.format(s=""), (6,)),
    Migration(
        "links",
        12,
        "link statistics of any day range",
        LINK_STATS_RANGES_DDL.format(s=""),
        (24,),
    ),
    Migration(
        "links",
        14,
        "link statistics' processed rows name their batch",
        "ALTER TABLE link_stats_processed ADD COLUMN batch_id INTEGER;",
        (28,),
    ),
)


def release_3_steps() -> list[Migration]:
    """The default apps' steps as release 3 had them: the link-stats tables made by the
    links app's steps 2, 12 and 14 among its others, no step of the projection's own."""
    steps = [s for s in default_apps().migrations if s.owner != "projection:link-stats"]
    first = next(i for i, step in enumerate(steps) if step.owner == "links")
    links = sorted(
        [*(s for s in steps if s.owner == "links"), *LINKS_STATS_STEPS], key=lambda s: s.version
    )
    others = [s for s in steps if s.owner != "links"]
    return [*others[:first], *links, *others[first:]]
