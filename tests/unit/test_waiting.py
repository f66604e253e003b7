"""Waiting on a loaded machine (docs/development/testing.md, "Waiting on a loaded
machine"): ``wait_for``'s budget stretches with the load, a promised bound does not, and
pytest-timeout's limit stretches with the waits. The load is the test's to set."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sluice.app.testing import patience, slowdown, wait_for
from sluice.app.testkit.processes import SLOWDOWN_MAX

CPUS = len(os.sched_getaffinity(0))


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """``load(per_cpu)``: the machine's load average, as ``slowdown()`` reads it, from now."""
    monkeypatch.delenv("SLUICE_TEST_SLOWDOWN", raising=False)

    def set_load(per_cpu: float) -> None:
        monkeypatch.setattr(os, "getloadavg", lambda: (per_cpu * CPUS,) * 3)

    return set_load


def after(seconds: float) -> Callable[[], Awaitable[bool]]:
    """A condition that holds ``seconds`` from now."""
    due = time.monotonic() + seconds

    async def holds() -> bool:
        return time.monotonic() >= due

    return holds


async def test_a_budget_stretches_with_the_load(load: Callable[[float], None]) -> None:
    load(0.5)  # quiet: the budget as written
    assert slowdown() == 1.0 and patience(2) == 2.0
    with pytest.raises(AssertionError, match=r"within 0\.\d s \(0\.2 s x 1\.0 for the machine"):
        await wait_for(after(1.0), timeout=0.2)

    load(100)  # far beyond the cores: stretched, as far as SLOWDOWN_MAX
    assert slowdown() == SLOWDOWN_MAX and patience(2) == 2 * SLOWDOWN_MAX
    started = time.monotonic()
    await wait_for(after(1.0), timeout=0.2)  # 1.6 s now
    assert time.monotonic() - started >= 1.0


async def test_a_load_that_comes_during_the_wait_stretches_it(
    load: Callable[[float], None],
) -> None:
    load(0.5)
    calls = 0
    due = time.monotonic() + 1.0

    async def holds() -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:
            load(4.0)  # the machine gets busy while the wait goes on
        return time.monotonic() >= due

    await wait_for(holds, timeout=0.3)  # 1.2 s once the load came


async def test_a_promised_bound_is_not_stretched(load: Callable[[float], None]) -> None:
    load(100)
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"0\.2 s x 1\.0"):
        await wait_for(after(1.0), timeout=0.2, exact=True)
    assert time.monotonic() - started < 1.0


async def test_a_drain_that_keeps_moving_is_not_cut_short_and_a_stuck_one_fails(
    load: Callable[[float], None],
) -> None:
    load(0.5)
    done = 0

    async def work(steps: int) -> None:  # a step every 0.2 s: 2 s for ten
        nonlocal done
        for _ in range(steps):
            await asyncio.sleep(0.2)
            done += 1

    async def drained() -> bool:
        return done == 10

    async def moved() -> int:
        return done

    worker = asyncio.create_task(work(10))
    await wait_for(drained, timeout=0.8, progress=moved)  # 2 s, each step within 0.8 s
    await worker

    done = 0
    worker = asyncio.create_task(work(5))  # stops half way
    started = time.monotonic()
    with pytest.raises(AssertionError, match="with no progress from 5"):
        await wait_for(drained, timeout=0.8, progress=moved)
    assert time.monotonic() - started >= 1.0 + 0.8
    await worker


def test_a_runner_known_to_be_slow_sets_a_floor(
    load: Callable[[float], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    load(0.1)
    monkeypatch.setenv("SLUICE_TEST_SLOWDOWN", "3")
    assert patience(2) == 6.0
    load(5.0)
    assert slowdown() == 5.0  # the load, when it says more


def _run_timed_test(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A test of 1.5 s under a 1 s pytest-timeout mark, in a pytest of its own."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_slow.py").write_text(
        textwrap.dedent("""
        import time
        import pytest

        @pytest.mark.timeout(1)
        def test_slow():
            time.sleep(1.5)
    """)
    )
    environment = {k: v for k, v in os.environ.items() if k != "SLUICE_TEST_SLOWDOWN"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "pytest_timeout",
            "-p",
            "sluice.app.testing",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_slow.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=patience(60),
        env={**environment, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env},
    )


def test_the_limit_per_test_stretches_as_the_waits_do(tmp_path: Path) -> None:
    stretched = _run_timed_test(tmp_path, SLUICE_TEST_SLOWDOWN="3")
    assert stretched.returncode == 0, stretched.stdout + stretched.stderr
    if slowdown() < 1.5:  # the machine itself would stretch the 1 s past the test's 1.5 s
        cut = _run_timed_test(tmp_path)
        assert cut.returncode != 0 and "Timeout" in cut.stdout + cut.stderr, cut.stdout
