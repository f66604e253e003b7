"""A SIGTERM that reaches a process while it is still starting stops it cleanly.

A supervisor may stop a replica it has just (re)started. Before, a SIGTERM that
came while the process imported its modules and opened its connections ended it
by the signal's default action (exit -15, no cleanup); the chaos test saw a
scheduler end so. Now ``main`` notes the signal first thing and the process stops
as soon as it runs (``sluice.process.stop_signals``), with exit status 0.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.app.testing import Child, wait_for

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def catches_sigterm(pid: int) -> bool:
    """The process has a handler of its own for SIGTERM (``SigCgt`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & SIGTERM_BIT)
    return False


def loaded_redis_client(pid: int) -> bool:
    """hiredis (redis-py's parser, compiled) is mapped: the process is past the imports of
    its commands, a moment before it runs them."""
    return "hiredis" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.stores("sqlite")  # how a process starts and stops; the store is not its concern
@pytest.mark.parametrize(
    "command", [["api"], ["relay"], ["scheduler"], ["worker", "article-views"]], ids=str
)
async def test_a_sigterm_during_start_stops_the_process_cleanly(
    spawn: Callable[..., Child], tmp_path: Path, command: list[str]
) -> None:
    log = tmp_path / "process.log"
    child = spawn(*command, log=log, SLUICE_PORT="0", SLUICE_LOG_LEVEL="info")

    async def caught() -> bool:
        return catches_sigterm(child.pid)

    await wait_for(caught, timeout=10, interval=0.001)
    # The signal comes while the process still imports, long before its event loop runs.
    assert not loaded_redis_client(child.pid), (
        "SIGTERM was caught only once the process had started"
    )
    assert child.terminate() == 0, log.read_text()[-3000:]
