"""Apps written on the fly for the app API's tests: a package in a temporary directory,
importable by this process and the processes it starts, optionally with the
``sluice.apps`` entry point an installed distribution would have."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

import pytest

from sluice.app import assembly


class AppDir:
    """A directory on ``sys.path`` (and on the children's ``PYTHONPATH``) holding apps."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.modules: list[str] = []
        monkeypatch.syspath_prepend(str(root))
        path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        monkeypatch.setenv("PYTHONPATH", path)

    def module(self, name: str, source: str) -> str:
        """Write module ``name`` (a top-level module) with ``source``; its name."""
        (self.root / f"{name}.py").write_text(dedent(source))
        self.modules.append(name)
        return name

    def entry_point(self, distribution: str, name: str, target: str) -> None:
        """The metadata of an installed ``distribution`` naming ``target`` (``module:attr``)
        under the ``sluice.apps`` entry points as ``name``, as ``pip install`` writes it."""
        info = self.root / f"{distribution}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n"
        )
        (info / "entry_points.txt").write_text(f"[sluice.apps]\n{name} = {target}\n")

    def forget(self) -> None:
        for name in self.modules:
            sys.modules.pop(name, None)


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppDir]:
    """Apps of this test only; the apps a process loaded are forgotten before and after
    (``sluice.app.assembly`` keeps what it loaded for the process's life)."""
    root = tmp_path / "apps"
    root.mkdir()
    made = AppDir(root, monkeypatch)
    assembly.forget_loaded()
    try:
        yield made
    finally:
        made.forget()
        assembly.forget_loaded()
