"""docs/tutorial.md, run as written: every ```console command against a real ``sluice up``.

The page is the first hour of a new user, so it must not go stale: each command runs in
one shell in a scratch directory, against ``sluice up`` started there as ``make run``
starts it (``make run`` itself would install the package again), and prints what the page
says it prints (``tests/console_blocks.py``). The page shows port 8080; the test's
``sluice up`` listens on a free port, and the page's address is rewritten to it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.app.testing import patience
from sluice.embedded.redis_server import die_with_parent, free_port
from tests.console_blocks import Shell, environment, run_steps, steps

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
PAGE_ADDRESS = "127.0.0.1:8080"
MILESTONES = (
    "/views",
    "/v1/users",
    "/v1/users/verify",
    "/v1/tokens",
    "/v1/links",
    "/stats",
    "/v1/reminders",
    "/exports",
    "/result",
    "/admin",
    "sluice status",
)


def _wait_until_serving(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + patience(30)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"sluice up exited {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    served = log.read_text()[-3000:]
    raise AssertionError(f"sluice up served nothing within 30 s (x the load):\n{served}")


@pytest.fixture
def reader_directory(tmp_path: Path) -> Path:
    """Where the reader stands: the checkout, with ``.venv/bin`` and ``var/`` in it."""
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    return tmp_path


@pytest.fixture
def sluice_up(reader_directory: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``sluice up`` as ``make run`` starts it: default data dir ``./var``, SQLite and
    the embedded Redis; on a free port instead of 8080."""
    port, log = free_port(), reader_directory / "up.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "sluice", "up"],
            cwd=reader_directory,
            env=environment({"SLUICE_PORT": str(port), "SLUICE_LOG_LEVEL": "warning"}),
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),  # pytest killed hard: no orphan keeps the port
        )
    try:
        _wait_until_serving(f"http://127.0.0.1:{port}", process, log)
        yield port, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_tutorial_runs_as_written(
    reader_directory: Path, sluice_up: tuple[int, subprocess.Popen[bytes]]
) -> None:
    port, process = sluice_up
    page = steps(TUTORIAL.read_text())
    commands = "\n".join(step.command for step in page)
    # The page's milestones are run, not only shown: a fence changed from ```console to
    # something else must not quietly take a step out of this test.
    for milestone in MILESTONES:
        assert milestone in commands, f"the tutorial no longer runs {milestone}"
    shell = Shell(reader_directory, environment({}))
    try:
        run_steps(shell, page, {PAGE_ADDRESS: f"127.0.0.1:{port}"}, wait=30.0)
    finally:
        shell.close()
    # "Ctrl-C stops everything cleanly", as the page says.
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 0
