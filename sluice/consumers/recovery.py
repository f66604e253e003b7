"""One worker process's consumers take turns with entries recovered after a crash.

A crash leaves no outcome, only Redis's delivery counter: every entry a process holds
when it dies is charged a delivery. So an entry recovered after a crash (from a
consumer's own pending list, or reclaimed from a dead consumer) is handled alone, and
if it kills the process again it alone is charged, and it reaches the dead letters
after ``max_deliveries`` while everything else goes on.

A process runs many consumers (a group per partition, several groups), so alone must
mean alone in the process: while one of its consumers handles a recovered entry, none
of the others reads or handles anything, or an innocent entry in hand in another
partition would be charged at every death with the poison and dead-lettered with it.
``RecoveryGate`` is that rule: normal batches share it, a recovered entry takes it
alone, and once one waits no new batch starts (in-flight ones finish first; a blocked
read ends within ``SLUICE_WORKER_BLOCK_MS``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager


class RecoveryGate:
    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._batches = 0  # normal batches in flight
        self._waiting = 0  # recoveries waiting for them to end
        self._recovering = False

    @asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        """A normal read and its handling; waits while a recovery waits or runs."""
        async with self._changed:
            await self._changed.wait_for(lambda: not (self._recovering or self._waiting))
            self._batches += 1
        try:
            yield
        finally:
            async with self._changed:
                self._batches -= 1
                self._changed.notify_all()

    @asynccontextmanager
    async def recovery(self) -> AsyncIterator[None]:
        """A recovered entry's claim and handling, with nothing else in flight."""
        async with self._changed:
            self._waiting += 1
            try:
                await self._changed.wait_for(lambda: not (self._recovering or self._batches))
            finally:
                self._waiting -= 1
            self._recovering = True
        try:
            yield
        finally:
            async with self._changed:
                self._recovering = False
                self._changed.notify_all()

    async def taking(self, work: Awaitable[None]) -> None:
        """``work`` as a normal batch (a flow group's handling, run on after its read)."""
        async with self.batch():
            await work
