"""Slots of a key across every process: a distributed semaphore per key (``Slots``).

Flow control (``sluice.flow.control``) limits a group's entries by one key each. Some
work fans out instead: one webhook entry calls many receivers, and what must be
bounded is the calls at once to each receiver's host, by whichever owner, worker or
host they come. ``Slots`` is that bound, on flow control's lease idea:

- ``held``: sorted set of a key's holders, scored by their lease's end (ms, Redis's
  clock). A holder renews its lease while it works; one past its lease (its process
  died) is dropped by the next script that reads the set, so a killed worker's slot
  frees when its lease runs out, never leaks.
- ``queue``: sorted set of the key's waiters in the order they first asked, and
  ``seen``: when each stops counting as waiting unless it asks again. A waiter asks
  every ``poll_s`` or so; the first ``limit - holders`` waiters in the queue take the
  free slots, so waiters are served first come first served across processes, and a
  waiter that went away (died, gave up) leaves the queue within ``seen``'s lease.

Each step is one Lua script over one key's sets, which share the key's hash tag: on
a Redis Cluster they are in one slot. Redis not answering is ``ServiceUnavailable``:
an outage, not the entry's fault (the consumer holds the entry and runs it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
import redis.exceptions
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.errors import ServiceUnavailable
from sluice.streams.engine_keys import Keys

if TYPE_CHECKING:
    from sluice.process.resources import Resources

log = structlog.get_logger(__name__)

_TIME = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: held, queue, seen. ARGV: holder, limit, lease ms, waiter's lease ms.
# Returns {1, 0} (holds a slot now) or {0, place in the queue (1: next)}.
_TAKE = (
    _TIME
    + """
local holder, limit = ARGV[1], tonumber(ARGV[2])
local lease, asking = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('ZREM', KEYS[2], unpack(gone))
  redis.call('ZREM', KEYS[3], unpack(gone))
end
local function hold()
  redis.call('ZADD', KEYS[1], now + lease, holder)
  redis.call('PEXPIRE', KEYS[1], lease + 60000)
  redis.call('ZREM', KEYS[2], holder)
  redis.call('ZREM', KEYS[3], holder)
  return {1, 0}
end
if redis.call('ZSCORE', KEYS[1], holder) then return hold() end
redis.call('ZADD', KEYS[2], 'NX', now, holder)
local free = limit - redis.call('ZCARD', KEYS[1])
local place = redis.call('ZRANK', KEYS[2], holder)
if place < free then return hold() end
redis.call('ZADD', KEYS[3], now + asking, holder)
redis.call('PEXPIRE', KEYS[2], asking + 60000)
redis.call('PEXPIRE', KEYS[3], asking + 60000)
return {0, place - math.max(free, 0) + 1}
"""
)

# KEYS: held. ARGV: holder, lease ms. 1 if it still held its slot (lease renewed).
_KEEP = (
    _TIME
    + """
return redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1])
"""
)

# KEYS: held, queue, seen. ARGV: holder. Frees its slot, or its place in the queue.
_LEAVE = """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
"""


class Slots:
    """At most ``limit`` holders of each key at once, across every worker and host
    (``limit`` 0: no bound, nothing asked of Redis). ``name`` tells one semaphore's
    keys from another's; a holder's lease of ``lease_s`` is renewed while it holds.

    ::

        hosts = Slots.of(resources, "webhook-hosts", limit=8)
        async with hosts.hold("hooks.example.com"):
            ...  # at most 8 of these at once, whoever runs them
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        name: str,
        limit: int,
        *,
        lease_s: float = 30.0,
        poll_s: float = 0.05,
    ) -> None:
        if "{" in name or "}" in name:
            raise ValueError(f"a Slots name has no braces: {name!r}")
        self.redis = redis
        self.keys = keys
        self.name = name
        self.limit = max(limit, 0)
        self.lease_ms = max(int(lease_s * 1000), 100)
        self.poll_s = poll_s
        # A waiter that stops asking for this long leaves the queue.
        self._asking_ms = max(int(poll_s * 40_000), 2000)
        self._take = redis.register_script(_TAKE)
        self._keep = redis.register_script(_KEEP)
        self._leave = redis.register_script(_LEAVE)

    @classmethod
    def of(
        cls,
        resources: Resources,
        name: str,
        limit: int,
        *,
        lease_s: float = 30.0,
        poll_s: float = 0.05,
    ) -> Slots:
        """The semaphore ``name`` of the deployment of ``resources``."""
        return cls(resources.redis, resources.keys, name, limit, lease_s=lease_s, poll_s=poll_s)

    def _keys(self, key: str) -> list[str]:
        base = self.keys.slots(self.name, key)
        return [base + "held", base + "queue", base + "seen"]

    async def take(self, key: str, holder: str) -> int:
        """One ask: 0 when ``holder`` holds a slot of ``key`` now, else its place in the
        key's queue (1: next). Asking again keeps its place; ``leave`` gives it up."""
        if not self.limit:
            return 0
        try:
            got, place = await self._take(
                keys=self._keys(key), args=[holder, self.limit, self.lease_ms, self._asking_ms]
            )
        except (redis.exceptions.RedisError, *REDIS_DOWN) as exc:
            raise ServiceUnavailable(f"slots {self.name!r} unavailable: {exc}") from exc
        return 0 if int(got) else int(place)

    async def keep(self, key: str, holder: str) -> bool:
        """Renew ``holder``'s lease; False when it no longer held a slot (it ran out)."""
        if not self.limit:
            return True
        return bool(await self._keep(keys=self._keys(key)[:1], args=[holder, self.lease_ms]))

    async def leave(self, key: str, holder: str) -> None:
        """Free ``holder``'s slot of ``key``, or its place in the queue."""
        if self.limit:
            await self._leave(keys=self._keys(key), args=[holder])

    async def holding(self, key: str) -> int:
        """Holders of ``key`` whose lease has not run out (for operators and tests)."""
        if not self.limit:
            return 0
        now = await self.redis.time()
        ms = int(now[0]) * 1000 + int(now[1]) // 1000
        return int(await self.redis.zcount(self._keys(key)[0], ms, "+inf"))

    @contextlib.asynccontextmanager
    async def hold(self, key: str, holder: str | None = None) -> AsyncIterator[None]:
        """Wait for a slot of ``key`` (first come, first served), hold it while the block
        runs (its lease renewed), free it after. Cancelling the wait leaves the queue."""
        if not self.limit:
            yield
            return
        holder = holder or uuid.uuid4().hex
        try:
            # Polled: the holders are other processes, no event of ours tells their end.
            while await self.take(key, holder):  # noqa: ASYNC110
                await asyncio.sleep(self.poll_s * (0.5 + random.random()))
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.leave(key, holder))
            raise
        keeper = asyncio.create_task(self._keeping(key, holder))
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(BaseException):
                await keeper
            try:
                await asyncio.shield(self.leave(key, holder))
            except Exception as exc:  # its lease runs out instead
                log.warning("slot not freed", slots=self.name, key=key, error=str(exc))

    async def _keeping(self, key: str, holder: str) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                if not await self.keep(key, holder):
                    log.warning("slot lost: its lease ran out", slots=self.name, key=key)
                    return
            except Exception as exc:  # tried again at the next third of the lease
                log.warning("slot lease not renewed", slots=self.name, key=key, error=str(exc))
