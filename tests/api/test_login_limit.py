"""The login limit is a sliding window: five failures in any fifteen minutes, with or without
Redis, attempts counted when they start (as in progress, refused as busy, not as failed).

Driven with a hand-set clock against a real Redis (and against a Redis that is not
there, for the per-process fallback), so minutes pass without waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from sluice.embedded.redis_server import free_port
from sluice.errors import TooManyRequests
from sluice.http.login_limit import (
    IN_PROGRESS_SECONDS,
    MAX_FAILURES,
    WINDOW_SECONDS,
    LoginLimiter,
)
from sluice.streams.engine_keys import Keys

EMAIL = "ada@example.org"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["redis", "redis down"])
async def limiter(
    request: pytest.FixtureRequest, redis: aioredis.Redis
) -> AsyncIterator[tuple[LoginLimiter, Clock]]:
    if request.param == "redis":
        yield LoginLimiter(redis, Keys("test"), clock := Clock()), clock
        return
    # Nothing listens there; no retries, as the API's client makes none.
    gone = aioredis.Redis(port=free_port(), retry=Retry(NoBackoff(), retries=0))
    try:
        yield LoginLimiter(gone, Keys("test"), clock := Clock()), clock
    finally:
        await gone.aclose()


async def start(limiter: LoginLimiter, email: str = EMAIL) -> str | TooManyRequests:
    """Start a login attempt: its token, or the refusal."""
    try:
        return await limiter.attempt(email)
    except TooManyRequests as exc:
        return exc


async def retry_after(limiter: LoginLimiter, email: str = EMAIL) -> int | None:
    """A login with a wrong password: the seconds the limiter asks to wait, or None (let
    through, then counted as a failure)."""
    attempt = await start(limiter, email)
    if isinstance(attempt, TooManyRequests):
        return int(attempt.headers["Retry-After"])
    await limiter.failed(email, attempt)
    return None


async def test_five_failures_refuse_the_email_until_the_oldest_is_fifteen_minutes_old(
    limiter: tuple[LoginLimiter, Clock],
) -> None:
    limit, clock = limiter
    start = clock.now
    for _ in range(MAX_FAILURES):
        assert await retry_after(limit) is None
        clock.now += 60
    assert await retry_after(limit) == WINDOW_SECONDS - 5 * 60  # the first is 5 minutes old
    assert await retry_after(limit, "bob@example.org") is None  # per email
    clock.now = start + WINDOW_SECONDS - 0.5
    assert await retry_after(limit) == 1
    clock.now = start + WINDOW_SECONDS  # the first failure leaves the window: one more try
    assert await retry_after(limit) is None
    assert await retry_after(limit) == 60  # until the second failure is fifteen minutes old


async def test_no_burst_of_nine_around_the_end_of_a_window(
    limiter: tuple[LoginLimiter, Clock],
) -> None:
    """A counter expiring 15 minutes after the first failure let 4 + 5 through in minutes."""
    limit, clock = limiter
    start = clock.now
    assert await retry_after(limit) is None  # one early failure
    clock.now = start + WINDOW_SECONDS - 60
    let_through = 0
    while clock.now < start + WINDOW_SECONDS + 5 * 60:  # the six minutes around the edge
        let_through += await retry_after(limit) is None
        clock.now += 10
    assert let_through == MAX_FAILURES  # 4 before the early one expires, 1 after


async def test_attempts_at_once_get_five_tries_not_one_each(
    limiter: tuple[LoginLimiter, Clock],
) -> None:
    limit, _ = limiter
    answers = await asyncio.gather(*(start(limit) for _ in range(20)))
    tokens = [a for a in answers if isinstance(a, str)]
    assert len(tokens) == MAX_FAILURES
    # The others are busy, not failed: nothing has failed yet.
    busy = [a for a in answers if isinstance(a, TooManyRequests)]
    assert {(a.headers["Retry-After"], a.detail) for a in busy} == {
        ("1", "other logins for this email are being checked; try again in a moment")
    }
    for token in tokens:  # all five had the wrong password
        await limit.failed(EMAIL, token)
    refused = await start(limit)
    assert isinstance(refused, TooManyRequests) and "failed" in refused.detail
    assert refused.headers["Retry-After"] == str(WINDOW_SECONDS)


async def test_correct_logins_at_once_are_busy_then_let_through(
    limiter: tuple[LoginLimiter, Clock],
) -> None:
    limit, _ = limiter
    answers = await asyncio.gather(*(start(limit) for _ in range(MAX_FAILURES + 3)))
    assert sum(isinstance(a, str) for a in answers) == MAX_FAILURES
    await limit.succeeded(EMAIL)  # the first right password: nothing failed, all clear
    assert isinstance(await start(limit), str)


async def test_an_attempt_that_never_finished_counts_as_a_failure(
    limiter: tuple[LoginLimiter, Clock],
) -> None:
    limit, clock = limiter
    for _ in range(MAX_FAILURES):
        assert isinstance(await start(limit), str)  # each request died before its answer
    assert await retry_after(limit) == 1  # still in progress: busy
    clock.now += IN_PROGRESS_SECONDS
    assert await retry_after(limit) == WINDOW_SECONDS - IN_PROGRESS_SECONDS


async def test_a_successful_login_clears_the_failures(limiter: tuple[LoginLimiter, Clock]) -> None:
    limit, _ = limiter
    for _ in range(MAX_FAILURES):
        assert await retry_after(limit) is None
    assert await retry_after(limit) is not None
    await limit.succeeded(EMAIL)
    assert await retry_after(limit) is None


async def test_an_attempt_without_an_answer_counts_neither_way(
    limiter: tuple[LoginLimiter, Clock],
) -> None:
    limit, clock = limiter
    for _ in range(MAX_FAILURES * 2):  # the database failed each time, say
        token = await start(limit)
        assert isinstance(token, str)
        await limit.abandon(EMAIL, token)
    clock.now += IN_PROGRESS_SECONDS
    assert await retry_after(limit) is None  # nothing was counted


async def test_every_key_of_the_limit_expires(redis: aioredis.Redis) -> None:
    clock = Clock()
    limit = LoginLimiter(redis, Keys("test"), clock)
    for _ in range(MAX_FAILURES):
        assert isinstance(await start(limit), str)  # each request died before its answer
    clock.now += IN_PROGRESS_SECONDS
    assert await retry_after(limit) is not None  # the five moved to the failures, refused
    keys = [key async for key in redis.scan_iter(match="test:login:*")]
    assert keys
    for key in keys:
        assert 0 < await redis.pttl(key) <= WINDOW_SECONDS * 1000, key
