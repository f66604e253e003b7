"""At most five failures per subject in any fifteen minutes, counted across replicas.

The subject is a login's email and client address, an email from every client (with a
larger window: sluice/http/account_logins.py), or a password link and its client.
A sliding window: each failure is kept with its time (a Redis sorted set per
subject, shared by every replica) until it is ``WINDOW`` seconds old, and a subject
with ``LIMIT`` failures inside the window is refused until the oldest of those
leaves it. (A counter expiring fifteen minutes after the first failure would let
nine failures through within minutes around its end.)

An attempt is counted when it starts, before the password is checked, in a
second set of attempts in progress: failures and attempts in progress together
are at most five, so twenty attempts sent at once get five tries, not twenty.
The others are refused as busy (``Retry-After: 1``), not as failed: correct
logins sent at once are not told they failed. A failed attempt moves to the
failures; a login that succeeds clears both sets; an attempt that ends without
an answer on the password (the database failed, the client went away) is
dropped; one still in progress after 30 s (its process died) counts as a
failure.

While Redis is down each process keeps its own sets, so the limit still holds
per replica rather than not at all.
"""

from __future__ import annotations

import asyncio
import bisect
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
from sluice.streams.engine_keys import Keys

log = structlog.get_logger(__name__)

# Failed attempts a subject may make in any ``WINDOW_SECONDS`` before it is refused.
MAX_FAILURES = 5
# The sliding window, in seconds, in which ``MAX_FAILURES`` failures are counted.
WINDOW_SECONDS = 15 * 60
_LOCAL_KEYS_MAX = 10_000  # emails remembered per process while Redis is down

# How long an attempt may be in progress before it counts as a failure (its request died
# between the start and the answer). Password checks take well under a second.
IN_PROGRESS_SECONDS = 30

# KEYS[1] the email's failures, KEYS[2] its attempts in progress (member: a unique
# token, score: start time in ms); ARGV: now (ms), window (ms), limit, the attempt's
# token, in-progress timeout (ms). Returns 0 (counted as in progress), -1 (busy: the
# attempts in progress fill the limit), or the milliseconds until a failure leaves
# the window.
_ATTEMPT = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local died = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ARGV[5], 'WITHSCORES')
for i = 1, #died, 2 do redis.call('ZADD', KEYS[1], died[i + 1], died[i]) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
redis.call('PEXPIRE', KEYS[2], window)
local failed = redis.call('ZCARD', KEYS[1])
if failed >= limit then
    local oldest = redis.call('ZRANGE', KEYS[1], failed - limit, failed - limit, 'WITHSCORES')
    return math.max(1, tonumber(oldest[2]) + window - now)
end
if failed + redis.call('ZCARD', KEYS[2]) >= limit then
    return -1
end
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('PEXPIRE', KEYS[2], window)
return 0
"""
# KEYS as above; ARGV: now (ms), window (ms), the attempt's token.
_FAILED = """
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0
"""


class _Local:
    """One email's failures and attempts in progress in this process (Redis down)."""

    def __init__(self) -> None:
        self.failures: list[float] = []  # sorted
        self.in_progress: dict[str, float] = {}

    def fail(self, at: float) -> None:
        bisect.insort(self.failures, at)

    def last(self) -> float:
        return max([*self.failures, *self.in_progress.values()], default=0.0)


class LoginLimiter:
    """Failed attempts per subject (an email) in a sliding window, counted across
    replicas in Redis: ``attempt`` before checking the password, then ``failed``,
    ``succeeded`` or ``abandon``; refusals are 429s (the module's notes)."""

    # What a refusal says. A subclass limits other guesses with the same windows and
    # script under keys and words of its own (sluice/builtin/links/http/link_passwords.py: link
    # passwords).
    BUSY = "other logins for this email are being checked; try again in a moment"
    USED_UP = "too many failed logins for this email; try again later"
    LIMIT = MAX_FAILURES  # failures in any WINDOW seconds
    WINDOW = WINDOW_SECONDS

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, clock: Callable[[], float] = time.time
    ) -> None:
        self.redis = redis
        self.keys = keys
        self._clock = clock  # wall-clock seconds: replicas compare each other's failure times
        self._attempt = redis.register_script(_ATTEMPT)
        self._failed = redis.register_script(_FAILED)
        self._local: dict[str, _Local] = {}

    def _keys(self, email: str) -> list[str]:
        digest = hashlib.sha256(email_key(email).encode()).hexdigest()[:32]
        return [self.keys.login_failures(digest), self.keys.login_attempts(digest)]

    async def attempt(self, email: str) -> str:
        """Start a login attempt: its token, for ``failed``. 429 with Retry-After while
        the email has used up its failures, or while attempts in progress fill them."""
        keys = self._keys(email)
        token = secrets.token_hex(8)
        now = self._clock()
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                wait_ms = int(
                    await self._attempt(
                        keys=keys,
                        args=[
                            int(now * 1000),
                            self.WINDOW * 1000,
                            self.LIMIT,
                            token,
                            IN_PROGRESS_SECONDS * 1000,
                        ],
                    )
                )
        except REDIS_ERRORS as exc:
            log.warning("login failures counted in this process only", error=repr(exc))
            wait_ms = self._local_attempt(keys[0], token, now)
        if wait_ms < 0:
            raise TooManyRequests(self.BUSY, 1)
        if wait_ms > 0:
            raise TooManyRequests(self.USED_UP, math.ceil(wait_ms / 1000))
        return token

    async def failed(self, email: str, token: str) -> None:
        """The attempt ``token`` failed: it counts for the window from now."""
        keys = self._keys(email)
        now = self._clock()
        local = self._local.get(keys[0])
        if local is not None and local.in_progress.pop(token, None) is not None:
            local.fail(now)
            return
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self._failed(keys=keys, args=[int(now * 1000), self.WINDOW * 1000, token])
        except REDIS_ERRORS as exc:  # started with Redis, failed without: count it here
            log.warning("login failure counted in this process only", error=repr(exc))
            self._local_entry(keys[0], now).fail(now)

    async def abandon(self, email: str, token: str) -> None:
        """The attempt ``token`` ended without an answer on the password (the database
        failed, the client went away): it counts neither way."""
        keys = self._keys(email)
        local = self._local.get(keys[0])
        if local is not None:
            local.in_progress.pop(token, None)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self.redis.zrem(keys[1], token)
        except REDIS_ERRORS:
            return  # left in progress: counted as a failure after IN_PROGRESS_SECONDS

    async def succeeded(self, email: str) -> None:
        """A login succeeded: forget the email's failures and attempts in progress."""
        keys = self._keys(email)
        self._local.pop(keys[0], None)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self.redis.delete(*keys)
        except REDIS_ERRORS:
            return

    def _local_attempt(self, key: str, token: str, now: float) -> int:
        """``attempt`` in this process alone: 0 and counted, -1 busy, or the ms to wait."""
        local = self._local_entry(key, now)
        died = [t for t, at in local.in_progress.items() if at <= now - IN_PROGRESS_SECONDS]
        for started in died:
            local.fail(local.in_progress.pop(started))
        del local.failures[: bisect.bisect_right(local.failures, now - self.WINDOW)]
        failed = len(local.failures)
        if failed >= self.LIMIT:
            oldest = local.failures[failed - self.LIMIT]
            return max(1, math.ceil((oldest + self.WINDOW - now) * 1000))
        if failed + len(local.in_progress) >= self.LIMIT:
            return -1
        local.in_progress[token] = now
        return 0

    def _local_entry(self, key: str, now: float) -> _Local:
        local = self._local.get(key)
        if local is None:
            if len(self._local) >= _LOCAL_KEYS_MAX:
                self._forget_old(now)
            local = self._local[key] = _Local()
        return local

    def _forget_old(self, now: float) -> None:
        stale = [k for k, local in self._local.items() if local.last() + self.WINDOW <= now]
        for key in stale:
            del self._local[key]
        if len(self._local) >= _LOCAL_KEYS_MAX:  # all recent: drop the oldest entries
            for key in list(self._local)[: len(self._local) // 2]:
                del self._local[key]
