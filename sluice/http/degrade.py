"""How long the API waits for Redis, and what counts as a dependency being unavailable.

Every Redis call on a request path is optional work with a fallback (dedupe,
leaderboard, login counting): past this timeout the request goes on without it.
Where there is no fallback, a failure of the database or of Redis is a 503, not a 500.
"""

from __future__ import annotations

import redis.exceptions

from sluice.store.errors import database_unavailable

# Seconds a request waits for a Redis call with a fallback before going on without it.
REDIS_TIMEOUT = 0.5
# What a Redis call raises when Redis is unavailable: the request falls back, or answers
# 503.
#
# RedisClusterException (SlotNotCoveredError, no node reachable) is not a RedisError.
REDIS_ERRORS = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    OSError,
    TimeoutError,
)


def unavailable(exc: BaseException) -> str | None:
    """The dependency an unexpected exception says is down ("the database", "Redis"), or None."""
    if database_unavailable(exc):
        return "the database"
    # Not any OSError: a file can fail too.
    if isinstance(exc, redis.exceptions.RedisError | redis.exceptions.RedisClusterException):
        return "Redis"
    return None
