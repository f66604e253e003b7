"""The Redis mail rate limiter: evenly spaced slots for all callers, waits, Redis failures."""

from __future__ import annotations

import asyncio
import itertools

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from sluice.builtin.accounts.mail.ratelimit import RateLimiter, RateLimitUnavailable
from sluice.embedded.redis_server import free_port

KEY = "sluice:mail:rate"


def unreachable() -> aioredis.Redis:
    """A client of a port nothing listens on, failing at once (no retries)."""
    return aioredis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))


async def test_slots_from_two_limiters_are_spaced_one_interval_apart(
    redis: aioredis.Redis,
) -> None:
    # 5 a second: ten callers asking at once are all in before the second slot, even on
    # a loaded machine (at 20 a second, one caller that came 50 ms late was given "now").
    first, second = RateLimiter(redis, KEY, 5), RateLimiter(redis, KEY, 5)
    grants = await asyncio.gather(*(lim.acquire() for lim in (first, second) * 5))
    slots = sorted(g.at for g in grants)
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) == pytest.approx(0.2, abs=1e-6)
    assert max(gaps) == pytest.approx(0.2, abs=1e-6)
    assert sorted(g.waited for g in grants)[0] == 0.0  # the first slot is now
    assert max(g.waited for g in grants) == pytest.approx(1.8, abs=0.05)


async def test_a_caller_sleeps_until_its_slot_instead_of_failing(redis: aioredis.Redis) -> None:
    limiter = RateLimiter(redis, KEY, 4)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await limiter.acquire()
    await limiter.acquire()
    third = await limiter.acquire()
    assert loop.time() - started >= 0.5 - 0.01  # two intervals of 0.25 s
    assert third.waited == pytest.approx(0.25, abs=0.02)


async def test_the_key_expires_when_no_one_sends(redis: aioredis.Redis) -> None:
    await RateLimiter(redis, KEY, 10).acquire()
    ttl = await redis.pttl(KEY)
    assert 0 < ttl <= 1100


async def test_a_rate_of_zero_means_no_limit_and_no_redis() -> None:
    nowhere = unreachable()
    try:
        grant = await RateLimiter(nowhere, KEY, 0).acquire()
    finally:
        await nowhere.aclose()
    assert grant.waited == 0.0


async def test_redis_down_is_a_transient_error() -> None:
    nowhere = unreachable()
    try:
        with pytest.raises(RateLimitUnavailable) as error:
            await RateLimiter(nowhere, KEY, 5).acquire()
    finally:
        await nowhere.aclose()
    assert not error.value.permanent
    assert "rate limiter unavailable" in str(error.value)
