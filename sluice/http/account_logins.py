"""Failed passwords of an account: counted per email and client, and per email from
everywhere (docs/guides/security.md, "Who a stranger can and cannot lock out").

Two sliding windows (``LoginLimiter``: a sorted set per subject in Redis, shared by
every replica, attempts counted as in progress when they start):

- per email and client address: 5 failures in any 15 minutes, then 429 for that
  client and that email only, the right password included (it cannot be told from a
  wrong one without the hash the limit spares). A stranger's guesses from their own
  addresses do not touch the owner's.
- per email, from every client: ``EMAIL_MAX_FAILURES`` (20) in any hour. Once used up,
  a client new to the account waits until the oldest failure leaves the hour, so
  guesses from any number of addresses go at most at 20 an hour (480 a day). A client
  that logged in to the account within ``KNOWN_SECONDS`` (30 days) passes this one:
  it is the owner, or shares the owner's address, and a stranger cannot take on the
  address of a TCP peer (nor a forwarded one, believed only from trusted proxies).
  Its failures count for its own window only.

A password checked right clears the client's window for the email and marks the client
known to it; the email's window keeps its failures (a stranger's guesses go on being
slowed). An attempt refused by the email's window is not counted by the client's.
While Redis is down each process keeps its own windows and known clients.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from sluice.http.degrade import REDIS_ERRORS, REDIS_TIMEOUT
from sluice.http.login_limit import LoginLimiter
from sluice.store.users import email_key
from sluice.streams.engine_keys import Keys

EMAIL_MAX_FAILURES = 20
EMAIL_WINDOW_SECONDS = 60 * 60
KNOWN_SECONDS = 30 * 24 * 60 * 60
_KNOWN_LOCAL_MAX = 10_000  # known clients remembered per process while Redis is down


class _ClientWindow(LoginLimiter):
    """Failures per email and client: the login windows, under a subject of both."""

    BUSY = "other logins for this email from this address are being checked; try again soon"
    USED_UP = "too many failed logins for this email from this address; try again later"


class _EmailWindow(LoginLimiter):
    """Failures per email from every client: a larger window of its own keys."""

    BUSY = "many logins for this email are being checked; try again in a moment"
    USED_UP = (
        "too many failed logins for this email from many addresses; logins from addresses"
        " new to this account are slowed down: try again later"
    )
    LIMIT = EMAIL_MAX_FAILURES
    WINDOW = EMAIL_WINDOW_SECONDS

    def _keys(self, email: str) -> list[str]:
        digest = hashlib.sha256(email_key(email).encode()).hexdigest()[:32]
        return [self.keys.login_email_failures(digest), self.keys.login_email_attempts(digest)]


@dataclass(frozen=True)
class Attempt:
    """A login attempt under way: its subjects and tokens in the two windows."""

    email: str
    pair: str  # the email and the client address
    pair_token: str
    email_token: str | None  # None: a known client, outside the email's window


class AccountLogins:
    def __init__(
        self, redis: aioredis.Redis, keys: Keys, clock: Callable[[], float] = time.time
    ) -> None:
        self.redis = redis
        self.keys = keys
        self._clock = clock
        self.client = _ClientWindow(redis, keys, clock)
        self.email = _EmailWindow(redis, keys, clock)
        self._known_local: dict[str, float] = {}  # pair digest: until when known

    async def attempt(self, email: str, client: str) -> Attempt:
        """Start a login attempt of ``client`` (an address) for ``email``; 429 with
        Retry-After while either window refuses it."""
        pair = f"{email_key(email)} {client}"
        pair_token = await self.client.attempt(pair)
        if await self._known(pair):
            return Attempt(email, pair, pair_token, None)
        try:
            email_token = await self.email.attempt(email)
        except BaseException:
            await asyncio.shield(self.client.abandon(pair, pair_token))
            raise
        return Attempt(email, pair, pair_token, email_token)

    async def failed(self, attempt: Attempt) -> None:
        await self.client.failed(attempt.pair, attempt.pair_token)
        if attempt.email_token is not None:
            await self.email.failed(attempt.email, attempt.email_token)

    async def abandon(self, attempt: Attempt) -> None:
        """No answer on the password: counted neither way."""
        await self.client.abandon(attempt.pair, attempt.pair_token)
        if attempt.email_token is not None:
            await self.email.abandon(attempt.email, attempt.email_token)

    async def succeeded(self, attempt: Attempt) -> None:
        await self.client.succeeded(attempt.pair)
        if attempt.email_token is not None:
            await self.email.abandon(attempt.email, attempt.email_token)
        await self._remember(attempt.pair)

    def _known_key(self, pair: str) -> str:
        return self.keys.login_known(hashlib.sha256(pair.encode()).hexdigest()[:32])

    async def _known(self, pair: str) -> bool:
        key = self._known_key(pair)
        if self._known_local.get(key, 0.0) > self._clock():
            return True
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                return bool(await self.redis.exists(key))
        except REDIS_ERRORS:
            return False

    async def _remember(self, pair: str) -> None:
        key = self._known_key(pair)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self.redis.set(key, b"1", px=KNOWN_SECONDS * 1000)
                return
        except REDIS_ERRORS:
            pass
        now = self._clock()
        if len(self._known_local) >= _KNOWN_LOCAL_MAX:
            for stale in [k for k, until in self._known_local.items() if until <= now]:
                del self._known_local[stale]
            if len(self._known_local) >= _KNOWN_LOCAL_MAX:
                self._known_local.pop(next(iter(self._known_local)))
        self._known_local[key] = now + KNOWN_SECONDS
