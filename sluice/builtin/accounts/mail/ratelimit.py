"""The global mail rate limit (``SLUICE_MAIL_RATE`` per second), shared through Redis,
and the optional rate per recipient domain (``SLUICE_MAIL_DOMAIN_RATE``: ``DomainRate``).

Every mail worker of every replica asks one Lua script for a send slot. The
script keeps a single key, the next free slot in Redis's own clock, and hands
out slots ``1 / rate`` seconds apart (GCRA without burst, a.k.a. virtual
scheduling): a caller gets ``max(now, next free)`` and moves the key one
interval on. The caller then sleeps until its slot, so an excess waits
instead of failing. Because the slots are evenly spaced, no window of one
second ever holds more than ``rate`` slots, across any number of replicas,
and because time comes from Redis, the hosts' clocks do not matter.

A slot taken by a caller that then does not send (already sent, crashed) is
simply lost: the limit is an upper bound, never a quota.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
import redis.exceptions

from sluice.app import Rate, ServiceUnavailable
from sluice.app.advanced import REDIS_DOWN

# KEYS[1]: next free slot (microseconds, Redis clock). ARGV[1]: interval (µs).
# Numbers go out through string.format: Lua's tostring would round 16 digits.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local slot = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local ttl_ms = math.floor((slot + interval - now) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.0f', slot + interval), 'PX', ttl_ms)
return {string.format('%.0f', slot), string.format('%.0f', now)}
"""


class RateLimitUnavailable(ServiceUnavailable):
    """Redis did not answer the limiter: a transient failure, retried later."""


@dataclass(frozen=True)
class Grant:
    at: float  # the slot, Unix seconds in Redis's clock
    waited: float  # seconds the caller slept for it


class RateLimiter:
    """At most ``rate`` sends per second in total; ``rate <= 0`` means no limit."""

    def __init__(self, redis: aioredis.Redis, key: str, rate: float) -> None:
        self.redis = redis
        self.key = key
        self.rate = rate
        self.interval_us = round(1_000_000 / rate) if rate > 0 else 0
        self._script = redis.register_script(_ACQUIRE)

    async def acquire(self) -> Grant:
        """Wait for the next free slot and return it."""
        if self.interval_us <= 0:
            return Grant(at=time.time(), waited=0.0)
        try:
            slot_us, now_us = await self._script(keys=[self.key], args=[self.interval_us])
        except (redis.exceptions.RedisError, *REDIS_DOWN) as exc:
            raise RateLimitUnavailable(f"mail rate limiter unavailable: {exc}") from exc
        wait = max(0.0, (int(slot_us) - int(now_us)) / 1_000_000)
        if wait:
            await asyncio.sleep(wait)
        return Grant(at=int(slot_us) / 1_000_000, waited=wait)


# KEYS[1]: the domain's theoretical arrival time (ms, Redis clock). ARGV: interval ms,
# burst tolerance ms. Returns 0 (a mail may go now; the time moved one interval on) or
# the ms until one may, leaving the time as it was: a mail that waits takes nothing.
_DOMAIN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
if tat - now > tolerance then
  return math.ceil(tat - now - tolerance)
end
local ttl = math.ceil(tat + interval - now) + 1000
redis.call('SET', KEYS[1], string.format('%.0f', tat + interval), 'PX', ttl)
return 0
"""


class DomainRate:
    """At most ``rate`` mails to one recipient domain (``SLUICE_MAIL_DOMAIN_RATE``),
    across every replica, with the rate's burst (GCRA in Redis's clock). A mail over it
    is not slept on in its handler: ``due`` tells how long until it may go, and the
    handler gives its entry back to wait (``NotYet``), so a burst to one domain is
    spread at the rate while mail to other domains goes on."""

    def __init__(self, redis: aioredis.Redis, key: Callable[[str], str], rate: Rate) -> None:
        self.key = key
        self.interval_ms = rate.per_seconds * 1000 / rate.count
        self.tolerance_ms = self.interval_ms * (rate.bucket - 1)
        self._script = redis.register_script(_DOMAIN)

    async def due(self, domain: str) -> float:
        """0 when a mail to ``domain`` may go now (counted), else seconds until one may."""
        try:
            wait_ms = await self._script(
                keys=[self.key(domain)], args=[self.interval_ms, self.tolerance_ms]
            )
        except (redis.exceptions.RedisError, *REDIS_DOWN) as exc:
            raise RateLimitUnavailable(f"mail domain rate unavailable: {exc}") from exc
        return int(wait_ms) / 1000
