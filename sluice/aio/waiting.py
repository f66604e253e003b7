"""Small waits that end early when the process is asked to stop, and task teardown."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


async def first_of(*events: asyncio.Event) -> None:
    """Return as soon as any of ``events`` is set."""
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel a background task and wait until it has finished unwinding.

    Cancelled again until it ends: a cancellation can be lost on its way. Python 3.11's
    ``asyncio.wait_for`` (redis-py awaits one for every write) drops a cancellation
    that arrives as the awaited write completes, and the task would run on, and its
    waiter would wait forever (a consumer's claim keeper did, in a cluster failover).
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    with contextlib.suppress(asyncio.CancelledError):
        await task
