"""A Redis lock: ``SET NX PX`` with a random token; release and renew compare the token."""

from __future__ import annotations

import secrets

import redis.asyncio as aioredis

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


# Taking the lock again with our own token succeeds: after a Redis restart the
# lock persisted in the AOF is still ours, and waiting out its TTL helps no one.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


class RedisLock:
    """A lock on one Redis key held with a random token and a TTL: ``acquire``,
    ``renew`` and ``release`` act only while the token is still the key's."""

    def __init__(
        self, redis: aioredis.Redis, key: str, ttl_ms: int, token: str | None = None
    ) -> None:
        self.redis = redis
        self.key = key
        self.ttl_ms = ttl_ms
        self.token = token or secrets.token_hex(16)
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)

    async def acquire(self) -> bool:
        """Take the lock, or confirm it is already ours."""
        return bool(await self._acquire(keys=[self.key], args=[self.token, self.ttl_ms]))

    async def renew(self) -> bool:
        """Extend the lock; False when it is no longer ours."""
        return bool(await self._renew(keys=[self.key], args=[self.token, self.ttl_ms]))

    async def release(self) -> bool:
        """Release the lock; False when it was already gone (expired or taken)."""
        return bool(await self._release(keys=[self.key], args=[self.token]))
