"""One assembly point (docs/design/index.md, "Assembly"): only the process's assembly
loads the apps; the engine and the apps are handed what they need.

`make lint` (lint-imports) holds the engine below `sluice.app` with no exception, but the
built-in apps sit above `sluice.app` in the layers and may import it: this test holds
them too, and names every module that asks for the loaded apps, at any depth (an import
inside a function included), not for annotations alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sluice
from sluice.app.assembly import assemble, default_apps
from sluice.config import load_config
from tests.module_imports import imports

ROOT = Path(sluice.__file__).parent
# The layers that build a process: the app API (the assembly, the testing plugin) and
# the command line.
ASSEMBLERS = ("app", "cli")
ASKING = ("sluice.app.loading", "sluice.app.assembly")


def test_no_module_outside_the_app_api_and_the_cli_asks_for_the_loaded_apps() -> None:
    asking = [
        f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
        for path in sorted(ROOT.rglob("*.py"))
        if path.relative_to(ROOT).parts[0] not in ASSEMBLERS
        for line, name in imports(ast.parse(path.read_text("utf-8")))
        if name in ASKING
    ]
    assert asking == []


def test_the_relay_reads_each_groups_aggregates_without_building_the_group() -> None:
    apps = default_apps()
    assert set(apps.aggregates) == set(apps.groups)
    assert apps.aggregates["article-views"] == ("articles",)
    # The reminders app's mails join the accounts app's group, and its stream with them.
    assert apps.aggregates["mail"] == ("reminders", "users")


def test_a_process_is_assembled_once_per_set_of_apps() -> None:
    first, second = assemble(load_config({})), assemble(load_config({"SLUICE_PORT": "9"}))
    assert first.apps is second.apps is default_apps()
    assert first.apps.schema.apps == tuple(first.apps.names())
    assert "purge-expired" in first.tasks()
