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

ROOT = Path(sluice.__file__).parent


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
    wrong = []
    for path in sorted((ROOT / "builtin").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                inside = name.startswith(("sluice.app", "sluice.builtin"))
                if (name == "sluice" or name.startswith("sluice.")) and not inside:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert wrong == []
