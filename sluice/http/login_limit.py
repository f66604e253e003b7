"""At most five failed logins per email in any fifteen minutes, counted across replicas.

A sliding window: each failure is kept with its time (a Redis sorted set per
email, shared by every replica) until it is fifteen minutes old, and an email
with five failures inside the window is refused until the oldest of those five
leaves it. (A counter expiring fifteen minutes after the first failure would let
nine failures through within minutes around its end.) An attempt is counted
when it starts, before the password is checked, and the failures are cleared
when a login succeeds: twenty attempts sent at once get five tries, not twenty.
While Redis is down each process keeps its own failure times, so the limit
still holds per replica rather than not at all.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import math
import secrets
import time
from collections.abc import Callable

import redis.asyncio as aioredis
import structlog

from sluice.errors import TooManyRequests
from sluice.http.degrade import REDIS_ERRORS, REDIS_TIMEOUT
from sluice.store.users import email_key
from sluice.streams.keys import Keys

log = structlog.get_logger(__name__)

MAX_FAILURES = 5
WINDOW_SECONDS = 15 * 60
_LOCAL_KEYS_MAX = 10_000  # emails remembered per process while Redis is down

# KEYS[1] the email's failures; ARGV: now (ms), window (ms), limit, a unique member.
# Refused (the milliseconds until a login may be tried again), or counted as a
# failure now, before the password is checked (0): concurrent attempts cannot all
# pass the check first. A login that succeeds clears the failures.
_ATTEMPT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1] - ARGV[2])
local n = redis.call('ZCARD', KEYS[1])
local limit = tonumber(ARGV[3])
if n >= limit then
    local oldest = redis.call('ZRANGE', KEYS[1], n - limit, n - limit, 'WITHSCORES')
    return math.max(1, tonumber(oldest[2]) + ARGV[2] - ARGV[1])
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0
"""


class LoginLimiter:
    def __init__(
        self, redis: aioredis.Redis, keys: Keys, clock: Callable[[], float] = time.time
    ) -> None:
        self.redis = redis
        self.keys = keys
        self._clock = clock  # wall-clock seconds: replicas compare each other's failure times
        self._attempt = redis.register_script(_ATTEMPT)
        self._local: dict[str, collections.deque[float]] = {}

    def _key(self, email: str) -> str:
        digest = hashlib.sha256(email_key(email).encode()).hexdigest()[:32]
        return self.keys.login_failures(digest)

    async def attempt(self, email: str) -> None:
        """Count a login attempt as a failure until it succeeds; 429 with Retry-After while
        the email has used up its failures (nothing is counted then)."""
        key = self._key(email)
        now = self._clock()
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                wait_ms = int(await self._attempt(keys=[key], args=[
                    int(now * 1000), WINDOW_SECONDS * 1000, MAX_FAILURES, secrets.token_hex(8),
                ]))  # fmt: skip
        except REDIS_ERRORS as exc:
            log.warning("login failures counted in this process only", error=repr(exc))
            wait_ms = self._local_attempt(key, now)
        if wait_ms > 0:
            raise TooManyRequests(
                "too many failed logins for this email; try again later", math.ceil(wait_ms / 1000)
            )

    async def succeeded(self, email: str) -> None:
        key = self._key(email)
        self._local.pop(key, None)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self.redis.delete(key)
        except REDIS_ERRORS:
            return

    def _local_attempt(self, key: str, now: float) -> int:
        """``attempt`` in this process alone: the milliseconds to wait, or 0 and counted."""
        times = self._local.get(key)
        if times is not None and len(times) >= MAX_FAILURES:
            left = times[0] + WINDOW_SECONDS - now  # the oldest of the last five
            if left > 0:
                return max(1, math.ceil(left * 1000))
        if times is None:
            if len(self._local) >= _LOCAL_KEYS_MAX:
                self._forget_old(now)
            times = self._local[key] = collections.deque(maxlen=MAX_FAILURES)
        times.append(now)
        return 0

    def _forget_old(self, now: float) -> None:
        stale = [k for k, times in self._local.items() if times[-1] + WINDOW_SECONDS <= now]
        for key in stale:
            del self._local[key]
        if len(self._local) >= _LOCAL_KEYS_MAX:  # all recent: drop the oldest entries
            for key in list(self._local)[: len(self._local) // 2]:
                del self._local[key]
