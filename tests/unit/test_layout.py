"""The layout's import rules cover the whole package (docs/design/index.md, "Layout").

lint-imports checks the contracts of pyproject.toml; these tests check that the
contracts still name every part of sluice, so that a package added later cannot slip
past them: the built-in apps are forbidden every top-level part but ``sluice.app``
(docs/guides/write-an-app.md: they stand on the public API a team's app uses).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import sluice
from tests.module_imports import imports

ROOT = Path(sluice.__file__).parent
TESTS = ROOT.parent / "tests"


def _contract(name: str) -> dict[str, object]:
    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["id"] == name)


def _top_level() -> set[str]:
    return {
        f"sluice.{path.name.removesuffix('.py')}"
        for path in ROOT.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name != "__init__.py")
    }


def test_the_built_in_apps_are_forbidden_every_part_of_sluice_but_the_app_api() -> None:
    contract = _contract("builtin-public")
    assert contract["source_modules"] == ["sluice.builtin"]
    forbidden = set(contract["forbidden_modules"])  # type: ignore[call-overload]
    assert forbidden == _top_level() - {"sluice.app", "sluice.builtin"}
    assert not contract.get("ignore_imports")


def test_no_contract_ignores_an_import() -> None:
    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        assert not contract.get("ignore_imports"), contract["id"]


def test_a_built_in_app_imports_only_the_app_api_even_inside_a_function() -> None:
    """lint-imports sees every import; this says which one broke the rule, by file."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / "builtin").rglob("*.py"))
        for line, name in imports(ast.parse(path.read_text()), for_annotations=True)
        if (name == "sluice" or name.startswith("sluice."))
        and not name.startswith(("sluice.app", "sluice.builtin"))
    ]
    assert wrong == []


def _test_module(name: str) -> str | None:
    """The test module (``test_*.py`` or ``conftest.py``) that importing ``name`` runs, if any."""
    parts = name.split(".")
    for end in range(2, len(parts) + 1):
        path = ROOT.parent.joinpath(*parts[:end]).with_suffix(".py")
        if path.is_file() and (path.name.startswith("test_") or path.name == "conftest.py"):
            return str(path.relative_to(ROOT.parent))
    return None


def test_no_test_module_imports_another() -> None:
    """What tests share lives in a module named by what it holds, never in a test module
    (docs/development/testing.md, "What each directory holds")."""
    wrong = {
        f"{path.relative_to(ROOT.parent)}:{line}: {module}"
        for path in TESTS.rglob("*.py")
        for line, name in imports(ast.parse(path.read_text()), for_annotations=True)
        if name.startswith("tests.") and (module := _test_module(name))
    }
    assert sorted(wrong) == []
