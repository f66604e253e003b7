"""``cancel_and_wait`` ends a task even when a cancellation is lost on the way, as
Python 3.11's ``asyncio.wait_for`` loses one that arrives as its awaitable completes."""

from __future__ import annotations

import asyncio

import pytest

from sluice.aio.waiting import cancel_and_wait


async def test_a_task_that_loses_a_cancellation_is_cancelled_again() -> None:
    lost = 0

    async def keeper() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # the first one goes missing, the task runs on

    task = asyncio.create_task(keeper())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), 5)
    assert task.cancelled() and lost == 1


async def test_a_task_that_fails_while_cancelled_passes_its_error_on() -> None:
    async def failing() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            raise RuntimeError("while unwinding")

    task = asyncio.create_task(failing())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="while unwinding"):
        await cancel_and_wait(task)
