"""The versions of the lowest-versions step (.ci/lowest).

``python .ci/lowest_versions.py pins FLOORS DEV_LOCK RUN_LOCK`` prints its constraints:

- Every direct runtime dependency (``[project] dependencies`` of pyproject.toml) pinned
  at its version in FLOORS, the output of ``uv pip compile --resolution lowest-direct``:
  the lowest each range allows. These are what the step tests.
- Every test tool (a package of the dev lock that the runtime lock does not have) pinned
  as locked, so the step runs the same pytest and plugins as ``make test``; except a
  tool that itself requires one of the direct runtime dependencies (its ``# via`` in
  the lock says so: ``pytest-aiohttp`` requires aiohttp, ``asyncpg-stubs`` a narrow
  asyncpg), which is left for the resolver to pick, or its locked version would drag
  the runtime dependency back up.

Transitive runtime dependencies are not pinned: the resolver takes the newest that
fit the floors, as a user's fresh install would.

``python .ci/lowest_versions.py report``, run by a venv's Python, prints each direct
runtime dependency with its range and the version installed there.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line of ``lock``."""
    found = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            found[canonical(match.group(1))] = match.group(2)
    return found


def required_by(lock: Path) -> dict[str, set[str]]:
    """name -> the packages that require it, from the lock's ``# via`` annotations."""
    via: dict[str, set[str]] = {}
    current = ""
    listing = False
    for line in lock.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current, listing = canonical(match.group(1)), False
            via[current] = set()
            continue
        comment = line.strip()
        if not comment.startswith("#") or not current:
            continue
        text = comment.lstrip("#").strip()
        if text == "via":
            listing = True
        elif text.startswith("via "):
            via[current].add(canonical(text.removeprefix("via ").split()[0]))
        elif listing and text:
            via[current].add(canonical(text.split()[0]))
    return via


def direct_dependencies(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    names = []
    for spec in project["dependencies"]:
        match = _NAME.match(spec)
        assert match, spec
        names.append(canonical(match.group(1)))
    return names


def pin_lines(floors_path: str, dev_path: str, run_path: str) -> None:
    direct = direct_dependencies(Path("pyproject.toml"))
    floors = pins(Path(floors_path))
    dev, run = pins(Path(dev_path)), pins(Path(run_path))
    needing_runtime = set().union(*(required_by(Path(dev_path)).get(d, set()) for d in direct))
    lines = [f"{name}=={floors[name]}" for name in direct]
    for name, version in sorted(dev.items()):
        if name not in run and name not in needing_runtime:
            lines.append(f"{name}=={version}")
    print("\n".join(lines))


def report() -> None:
    """Each direct runtime dependency: its range in pyproject.toml, the version installed."""
    from importlib.metadata import version

    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        name = canonical(_NAME.match(spec).group(1))  # type: ignore[union-attr]
        wanted = re.sub(r"^[A-Za-z0-9._-]+(\[[^]]*\])?", "", spec).strip() or "any"
        print(f"  {name:22} {wanted:16} {version(name)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["pins"]:
        pin_lines(*sys.argv[2:])
    elif sys.argv[1:] == ["report"]:
        report()
    else:
        sys.exit(__doc__)
