"""Logins, registrations and failed admin authentications per client address
(docs/guides/security.md).

The login limiter counts failures per email; these count per address, so one
client cannot make the service hash passwords for thousands of emails, register
accounts by the hundred, or guess the admin token. Each kind has a bucket per
address of ``limit`` tokens that refills over ``SLUICE_CLIENT_LIMIT_WINDOW_SECONDS``
(GCRA: ``limit`` at once, then one per ``window / limit``): beyond it, 429 with
the ``Retry-After`` until the next token. Logins and registrations take a token
when they start, whatever their outcome: a login's password cannot be told right
from wrong without the hash the limit is there to spare, and passing a right one
while refusing wrong ones would let guessing go on between the refusals. A failed
admin authentication (a token that is neither the admin's nor a user's) takes one
when it fails; the right admin token and a user's valid token always pass (they are
not guessable, and checking them costs next to nothing), so an address used up by
someone else locks no one out who holds a real token.

The buckets live in Redis (one key per kind and address digest, shared by every
replica); while Redis is down each process keeps its own, so the limits still
hold per replica rather than not at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
import structlog
from aiohttp import web

from sluice.config import Config
from sluice.config.networks import trusted_networks
from sluice.errors import TooManyRequests
from sluice.http.client_address import client_address
from sluice.http.degrade import REDIS_ERRORS, REDIS_TIMEOUT
from sluice.streams.engine_keys import Keys

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Kind:
    name: str  # in the Redis key
    refusal: str  # the 429's detail


# What ``ClientLimits`` counts per client address for login attempts, and the 429 it gives
# past the limit.
LOGIN = Kind("logins", "too many logins from this address; try again later")
# What ``ClientLimits`` counts per client address for registrations, and the 429 it gives
# past the limit.
REGISTER = Kind("registrations", "too many registrations from this address; try again later")
ADMIN = Kind(
    "admin-failures", "too many failed admin authentications from this address; try again later"
)

_LOCAL_KEYS_MAX = 10_000  # buckets remembered per process while Redis is down

# GCRA. KEYS[1]: the bucket's theoretical arrival time (ms). ARGV: now (ms), interval
# (ms per token), window (ms: limit * interval). Takes a token if one is left; returns
# 0, or the ms until a token is back.
_BUCKET = """
local now, interval, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local wait = tat + interval - window - now
if wait > 0 then return math.ceil(wait) end
tat = tat + interval
redis.call('SET', KEYS[1], tostring(tat), 'PX', math.ceil(tat - now))
return 0
"""


def _bucket(tat: float, now: float, interval: float, window: float) -> tuple[int, float]:
    """The script above in this process: (ms to wait or 0, the new arrival time)."""
    tat = max(tat, now)
    wait = tat + interval - window - now
    if wait > 0:
        return math.ceil(wait), tat
    return 0, tat + interval


class ClientLimits:
    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        config: Config,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.trusted = trusted_networks(config.trusted_proxies)
        self._window_ms = config.client_limit_window_seconds * 1000
        self._limits = {
            LOGIN: config.logins_per_client,
            REGISTER: config.registrations_per_client,
            ADMIN: config.admin_failures_per_client,
        }
        self._clock = clock  # wall clock: replicas share the buckets
        self._script = redis.register_script(_BUCKET)
        self._local: dict[str, float] = {}

    def address(self, request: web.BaseRequest) -> str:
        return client_address(request, self.trusted)

    async def take(self, kind: Kind, request: web.BaseRequest) -> None:
        """Count one attempt of ``kind`` from the request's address; 429 beyond its limit."""
        address = self.address(request)
        digest = hashlib.sha256(address.encode()).hexdigest()[:32]
        key = self.keys.client_limit(kind.name, digest)
        interval = self._window_ms / self._limits[kind]
        now = self._clock() * 1000
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                args = [now, interval, self._window_ms]
                wait_ms = int(await self._script(keys=[key], args=args))
        except REDIS_ERRORS as exc:
            log.warning("client limit counted in this process only", error=repr(exc))
            wait_ms = self._local_take(key, now, interval)
        if wait_ms > 0:
            raise TooManyRequests(kind.refusal, math.ceil(wait_ms / 1000))

    def _local_take(self, key: str, now: float, interval: float) -> int:
        if key not in self._local and len(self._local) >= _LOCAL_KEYS_MAX:
            self._forget_old(now)
        wait, tat = _bucket(self._local.get(key, 0.0), now, interval, self._window_ms)
        self._local[key] = tat
        return wait

    def _forget_old(self, now: float) -> None:
        # A bucket whose arrival time has passed is full again: the same as no bucket.
        for key in [k for k, tat in self._local.items() if tat <= now]:
            del self._local[key]
        if len(self._local) >= _LOCAL_KEYS_MAX:  # all in use: drop the oldest half
            for key in list(self._local)[: len(self._local) // 2]:
                del self._local[key]
