"""What a module of sluice imports, read from its source: the tests that hold the layout's
rules by file and line (tests/unit/test_assembly.py, tests/unit/test_layout.py)."""

from __future__ import annotations

import ast


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.AST, *, for_annotations: bool = False) -> list[tuple[int, str]]:
    """Every module ``tree`` imports, at any depth (inside a function too), by line: for
    ``from m import n``, both ``m`` and ``m.n``. Imports under ``if TYPE_CHECKING:`` count
    only with ``for_annotations`` (no dependency at run time, but one all the same)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node) and not for_annotations:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found
