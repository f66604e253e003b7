"""The package a user installs: sluice built by ``python -m build`` (an sdist, then the
wheel from it), installed into an empty venv outside the repo (the runtime lock with
its hashes, then the wheel alone), serves the tour under ``sluice up``; and a new
user's app, written from docs/guides/write-an-app.md alone, passes ``mypy --strict``
and its tests in that venv, each test in under a second.

So the migrations run from the wheel, the /admin page and any other file sluice reads
at run time are inside it (package-data in pyproject.toml), the runtime lock installs
on its own, and ``sluice --version`` reads the installed metadata. The app is the
guide's code blocks put together (tests/doc_files.py), in a directory of its own
outside the repo, with what the guide's "Test it" says to install (at the versions of
requirements/dev.txt): so the guide's code is complete and typed, the wheel ships
sluice's types (py.typed) and the testing plugin, and the harness's tests take the
milliseconds the guide promises ("Most tests: the harness, in milliseconds").

Slow (a build, a venv, an install of some thirty packages, mypy from a cold cache:
two minutes or so), so the wheel is built once for the module's tests, which run on one
worker (``xdist_group``; ``make test`` distributes by group), once per suite and not
in the lowest-versions step. Needs PyPI (or pip's cache) for the build backend and the
lock's packages, as a user's install does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sluice.app.testing import patience, wait_for
from sluice.embedded.redis_server import free_port
from tests import doc_files

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(600), pytest.mark.xdist_group("wheel")]

ROOT = Path(__file__).resolve().parents[2]
# What a clean checkout does not have: venvs, caches, data, earlier builds.
_NOT_SOURCE = (
    ".git",
    ".venv*",
    "*.egg-info",
    "__pycache__",
    "var",
    "build",
    "dist",
    "*_cache",
    ".hypothesis",
    "node_modules",
)
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(*command: str | Path, cwd: Path, timeout: float = 300) -> str:
    """``command``'s output (run in ``_clean_env``); its output in the failure if it fails."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would point Python back at this repo, or
    sluice or pytest at the test suite's settings (an xdist worker's among them)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLUICE_", "PYTHON", "VIRTUAL_ENV", "PROMETHEUS_", "PYTEST_"))
    }
    env.update(extra)
    return env


@dataclass(frozen=True)
class Installed:
    """The wheel installed in a venv, both in ``home``, a directory outside the repo."""

    home: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    """The wheel, built from a copy of the checkout, installed with the runtime lock in
    an empty venv; the directory removed afterwards whatever happened (a venv is large:
    not one for pytest's kept tmp dirs)."""
    with tempfile.TemporaryDirectory(prefix="sluice-wheel-") as directory:
        outside = Path(directory)
        dist, venv = outside / "dist", outside / "venv"
        # From a copy without the build's leftovers: an egg-info of an earlier build (the
        # editable install's) lists files for the sdist that pyproject.toml may not.
        source = outside / "source"
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
        _run(sys.executable, "-m", "build", "--outdir", dist, source, cwd=outside)
        [wheel] = dist.glob("*.whl")
        assert wheel.name == f"sluice-{VERSION}-py3-none-any.whl"

        _run(sys.executable, "-m", "venv", venv, cwd=outside)
        python = venv / "bin" / "python"
        _run(
            *_pip(python), "--require-hashes", "-r", ROOT / "requirements" / "run.txt", cwd=outside
        )
        _run(*_pip(python), "--no-deps", wheel, cwd=outside)
        yield Installed(outside, venv)


def _pip(python: Path) -> tuple[str | Path, ...]:
    return (python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet")


@contextlib.asynccontextmanager
async def _sluice_up(sluice: Path, home: Path, port: int) -> AsyncIterator[str]:
    """``sluice up`` of the installed wheel on ``port``, data in ``home``/var; its URL.
    Stopped with Ctrl-C at the end (exit 0 expected), killed if the test failed first."""
    env = _clean_env(SLUICE_DATA_DIR=str(home / "var"), SLUICE_PORT=str(port))
    log = home / "up.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sluice, "up", cwd=home, env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
    try:
        assert process.stdout is not None
        url = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(60):
                while line := (await process.stdout.readline()).decode():
                    if line.startswith("sluice is up: "):
                        url = line.split()[3]
                        break
        assert url, f"sluice up printed no URL; its log:\n{log.read_text()[-3000:]}"
        yield url
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), patience(30)) == 0, log.read_text()[-3000:]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _tour(url: str) -> None:
    """What README's tour does, each answer as docs/reference/http-api.md says."""
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, status: int, **kw: Any) -> Any:
            async with http.request(method, f"{url}{path}", allow_redirects=False, **kw) as r:
                assert r.status == status, f"{method} {path}: {r.status} {await r.text()}"
                if r.content_type == "application/json":
                    return await r.json()
                return (r.headers.get("Location"), await r.text())

        await call("POST", "/v1/articles/hello/views", 202, json={"viewer": "ada"})
        account = {"email": "ada@example.org", "password": "correct horse battery"}
        await call("POST", "/v1/users", 201, json=account)
        token = await call("POST", "/v1/tokens", 201, json=account)
        bearer = {"Authorization": f"Bearer {token['token']}"}
        link = await call(
            "POST", "/v1/links", 201, json={"url": "https://example.org/a"}, headers=bearer
        )
        code = link["code"]
        location, _ = await call("GET", f"/{code}", 302)
        assert location == "https://example.org/a"

        async def counted() -> bool:
            stats = await call("GET", f"/v1/links/{code}/stats", 200, headers=bearer)
            total: int = stats["total"]
            return total == 1

        await wait_for(counted, timeout=30)
        reminder = {"cron": "0 0 9 * * mon-fri", "timezone": "Europe/Paris", "text": "stand-up"}
        await call("POST", "/v1/reminders", 201, json=reminder, headers=bearer)
        document = await call("GET", "/openapi.json", 200)
        assert "/v1/links" in document["paths"]
        _, page = await call("GET", "/admin", 200)
        assert "<title>sluice · operations</title>" in page


async def test_the_wheel_installed_outside_the_repo_serves_the_tour(
    installed: Installed,
) -> None:
    home, venv = installed.home, installed.venv
    # The sluice that runs is the wheel's, not this tree's.
    where = _run(installed.python, "-c", "import sluice; print(sluice.__file__)", cwd=home)
    assert Path(where.strip()).is_relative_to(venv), where

    sluice = venv / "bin" / "sluice"
    assert _run(sluice, "--version", cwd=home) == f"sluice {VERSION}\n"
    async with _sluice_up(sluice, home, free_port()) as url:
        await _tour(url)


GUIDE = ROOT / "docs" / "guides" / "write-an-app.md"
# What the guide promises a harness test takes: milliseconds, so a second is a wide margin.
HARNESS_TEST_SECONDS = 1.0


def test_an_app_written_from_the_guide_type_checks_and_its_harness_tests_pass_quickly(
    installed: Installed,
) -> None:
    guide = GUIDE.read_text()
    app = installed.home / "app"
    app.mkdir()
    assert "src/sluice_orders/app.py" in doc_files.write(guide, app)
    _install_what_the_guide_says(installed.python, guide, app)

    checked = subprocess.run(
        [installed.python, "-m", "mypy", "--strict"],
        cwd=app,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert checked.returncode == 0, f"mypy --strict:\n{checked.stdout}{checked.stderr}"

    tested = subprocess.run(
        [
            installed.python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--durations=0",
            "--durations-min=0",
        ],
        cwd=app,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = f"{tested.stdout[-5000:]}{tested.stderr[-3000:]}"
    assert tested.returncode == 0, f"the app's tests:\n{said}"
    # Every test the guide writes ran (at least three: a handler, a projection, a task);
    # a test the guide only shows (a block without a file name) is not the app's.
    tests = "\n".join(path.read_text() for path in sorted((app / "tests").rglob("test_*.py")))
    written = re.findall(r"^async def (test_\w+)", tests, re.MULTILINE)
    took = _durations(tested.stdout)
    assert {name for name, _ in took} == set(written) and len(written) >= 3, said
    # Each test's call, and with its own fixtures (the harness opened and closed); but the
    # first test's setup also starts the session's redis-server and migrates the template
    # database that every later test copies, so its call alone.
    slow = {}
    for name in written:
        phases = {phase: took[name, phase] for phase in ("setup", "call", "teardown")}
        spent = phases["call"] if name == written[0] else sum(phases.values())
        if spent >= HARNESS_TEST_SECONDS:
            slow[name] = phases
    assert not slow, f"harness tests of {HARNESS_TEST_SECONDS} s or more: {slow}\n{said}"


def _durations(output: str) -> dict[tuple[str, str], float]:
    """pytest's ``--durations`` lines: (test, phase) to seconds."""
    return {
        (match["test"], match["phase"]): float(match["seconds"])
        for match in re.finditer(
            r"^(?P<seconds>[\d.]+)s (?P<phase>setup|call|teardown) +\S+::(?P<test>\w+)$",
            output,
            re.MULTILINE,
        )
    }


def _install_what_the_guide_says(python: Path, guide: str, app: Path) -> None:
    """The packages of the guide's ``pip install`` line, but sluice (the wheel is in
    already), at the versions of the development lock as the project's own tests run."""
    [line] = [
        line
        for block in doc_files.blocks(guide, "sh")
        for line in block.splitlines()
        if line.startswith("pip install ")
    ]
    packages = line.split()[2:]
    assert "sluice" in packages, line
    pins = re.findall(
        r"^([A-Za-z0-9_.-]+==[^ \\\n]+(?: ; [^\\\n]+)?)",
        (ROOT / "requirements" / "dev.txt").read_text(),
        re.MULTILINE,
    )
    constraints = app.parent / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    _run(*_pip(python), "-c", constraints, *(p for p in packages if p != "sluice"), cwd=app)
