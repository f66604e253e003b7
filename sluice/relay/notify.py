"""Wake the relay soon after a commit, in this process and in others."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
import redis.exceptions
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait

log = structlog.get_logger(__name__)


class CommitNotifier:
    """Coalesces commits into at most one PUBLISH in flight; the relay also polls.

    ``notify`` is a plain callback for ``Store.add_commit_listener``; it never
    blocks the committing request and never fails it when Redis is down.
    """

    def __init__(self, redis: aioredis.Redis, channel: str) -> None:
        self._redis = redis
        self._channel = channel
        self._pending = False
        self._task: asyncio.Task[None] | None = None
        self.local = asyncio.Event()

    def notify(self) -> None:
        self.local.set()
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._publish())

    async def _publish(self) -> None:
        while self._pending:
            self._pending = False
            try:
                await self._redis.publish(self._channel, b"1")
            except (redis.exceptions.RedisError, *REDIS_DOWN):
                return  # the relay's poll covers it

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
