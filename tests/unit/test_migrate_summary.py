"""What ``sluice migrate`` says of the steps it ran (the process-level test is in
tests/integration/test_cli.py)."""

from __future__ import annotations

from sluice.cli.commands import migrated


def test_nothing_applied_is_said_so() -> None:
    assert migrated([]) == "database is up to date: nothing to apply"


def test_one_step_of_an_app_added_later() -> None:
    assert migrated(["shop:3"]) == "database migrated: 1 migration step applied (shop:3)"


def test_a_new_database_runs_each_owner_s_versions_together() -> None:
    applied = ["sluice:1", "sluice:2", "sluice:3", "links:1", "links:2", "links:4"]
    applied.append("projection:article-views:1")
    assert migrated(applied) == (
        "database created: 7 migration steps applied"
        " (sluice:1-3, links:1-2,4, projection:article-views:1)"
    )
