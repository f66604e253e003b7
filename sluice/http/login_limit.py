"""At most five failed logins per email in fifteen minutes, counted across replicas.

Failures are counted in Redis. While Redis is down each process keeps its own
count, so the limit still holds per replica rather than not at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import redis.asyncio as aioredis
import structlog

from sluice.errors import TooManyRequests
from sluice.http.degrade import REDIS_ERRORS, REDIS_TIMEOUT
from sluice.store.users import email_key
from sluice.streams.keys import Keys

log = structlog.get_logger(__name__)

MAX_FAILURES = 5
WINDOW_SECONDS = 15 * 60

_COUNT_FAILURE = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""


class LoginLimiter:
    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._count = redis.register_script(_COUNT_FAILURE)
        self._local: dict[str, tuple[int, float]] = {}

    def _key(self, email: str) -> str:
        digest = hashlib.sha256(email_key(email).encode()).hexdigest()[:32]
        return self.keys.login_failures(digest)

    async def check(self, email: str) -> None:
        """Raise 429 with Retry-After while the email has used up its failures."""
        key = self._key(email)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                pipe = self.redis.pipeline(transaction=False)
                pipe.get(key)
                pipe.ttl(key)
                raw, ttl = await pipe.execute()
            count = int(raw or 0)
        except REDIS_ERRORS:
            count, ttl = self._local_state(key)
        if count >= MAX_FAILURES:
            raise TooManyRequests("too many failed logins for this email; try again later", ttl)

    async def failed(self, email: str) -> None:
        key = self._key(email)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self._count(keys=[key], args=[WINDOW_SECONDS])
        except REDIS_ERRORS as exc:
            log.warning("login failures counted in this process only", error=repr(exc))
            count, _ = self._local_state(key)
            self._local[key] = (count + 1, self._local.get(key, (0, time.monotonic()))[1])

    async def succeeded(self, email: str) -> None:
        key = self._key(email)
        self._local.pop(key, None)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self.redis.delete(key)
        except REDIS_ERRORS:
            return

    def _local_state(self, key: str) -> tuple[int, int]:
        count, started = self._local.get(key, (0, time.monotonic()))
        left = WINDOW_SECONDS - (time.monotonic() - started)
        if left <= 0:
            self._local.pop(key, None)
            return 0, 0
        return count, int(left) + 1
