"""The benchmarks' child processes: each started in a session of its own, so that a
stop reaches whatever it started too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m sluice <args>``, its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sluice", *args],
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes], grace: float = 20.0) -> int:
    """SIGTERM to its session, SIGKILL after ``grace`` seconds; its exit code."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode
