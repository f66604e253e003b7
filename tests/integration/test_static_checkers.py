"""An app's package outside this checkout type-checks against the installed sluice.

A team writes its app in a package of its own and runs ``mypy --strict`` there
(docs/guides/write-an-app.md). That needs an install of sluice a static checker can
follow: the ``make run``/``make test`` venv installs sluice editable in setuptools'
``compat`` mode (a path in a .pth file), because the default mode's import hook is
code that mypy does not run (docs/development/dependencies.md).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]

SHOP = """\
from sluice.app import App, Event

app = App("shop")


@app.event
class OrderPlaced(Event, frozen=True, kw_only=True, tag=True):
    order_id: str


placed: OrderPlaced = OrderPlaced(order_id=7)
"""


# mypy analyses sluice and its libraries from a cold cache: seconds of CPU, more on a
# loaded machine.
@pytest.mark.timeout(600)
def test_mypy_strict_in_a_package_outside_the_repository_reads_sluice_s_types(
    tmp_path: Path,
) -> None:
    package = tmp_path / "shop"
    package.mkdir()
    assert not package.resolve().is_relative_to(REPOSITORY)
    (package / "shop.py").write_text(textwrap.dedent(SHOP))

    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "shop.py",
        ],
        cwd=package,
        capture_output=True,
        text=True,
        timeout=540,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )

    said = checked.stdout + checked.stderr
    assert "import-not-found" not in said, said
    assert "import-untyped" not in said, said
    # The one mistake in the file is found, which only sluice's own types can tell:
    # the event's field is a str.
    assert 'shop.py:11: error: Argument "order_id" to "OrderPlaced" has incompatible type' in said
    assert "Found 1 error in 1 file" in said, said
