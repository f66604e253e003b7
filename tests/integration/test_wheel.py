"""The package a user installs: sluice built by ``python -m build`` (an sdist, then the
wheel from it), installed into an empty venv outside the repo (the runtime lock with
its hashes, then the wheel alone), serves the tour under ``sluice up``.

So the migrations run from the wheel, the /admin page and any other file sluice reads
at run time are inside it (package-data in pyproject.toml), the runtime lock installs
on its own, and ``sluice --version`` reads the installed metadata. Slow (a build, a
venv, an install of some thirty packages: a minute or so), so it runs once per suite
and not in the lowest-versions step. Needs PyPI (or pip's cache) for the build backend
and the lock's packages, as a user's install does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sluice.app.testing import patience
from sluice.embedded.redis_server import free_port
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
# What a clean checkout does not have: venvs, caches, data, earlier builds.
_NOT_SOURCE = (".git", ".venv*", "*.egg-info", "__pycache__", "var", "build", "dist", "*_cache",
               ".hypothesis", "node_modules")  # fmt: skip
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(*command: str | Path, cwd: Path) -> str:
    """``command``'s output (run in ``_clean_env``); its output in the failure if it fails."""
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=_clean_env(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would point Python back at this repo, or
    sluice at the test suite's settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLUICE_", "PYTHON", "VIRTUAL_ENV", "PROMETHEUS_"))
    }
    env.update(extra)
    return env


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the repo, removed afterwards whatever happened (a venv is
    large: not one for pytest's kept tmp dirs)."""
    with tempfile.TemporaryDirectory(prefix="sluice-wheel-") as directory:
        yield Path(directory)


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
            return stats["total"] == 1

        await wait_for(counted, timeout=30)
        reminder = {"cron": "0 0 9 * * mon-fri", "timezone": "Europe/Paris", "text": "stand-up"}
        await call("POST", "/v1/reminders", 201, json=reminder, headers=bearer)
        document = await call("GET", "/openapi.json", 200)
        assert "/v1/links" in document["paths"]
        _, page = await call("GET", "/admin", 200)
        assert "<title>sluice · operations</title>" in page


async def test_the_wheel_installed_outside_the_repo_serves_the_tour(outside: Path) -> None:
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
    pip = (python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet")
    _run(*pip, "--require-hashes", "-r", ROOT / "requirements" / "run.txt", cwd=outside)
    _run(*pip, "--no-deps", wheel, cwd=outside)
    # The sluice that runs is the wheel's, not this tree's.
    where = _run(python, "-c", "import sluice; print(sluice.__file__)", cwd=outside)
    assert Path(where.strip()).is_relative_to(venv), where

    sluice = venv / "bin" / "sluice"
    assert _run(sluice, "--version", cwd=outside) == f"sluice {VERSION}\n"
    async with _sluice_up(sluice, outside, free_port()) as url:
        await _tour(url)
