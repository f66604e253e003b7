"""How long the API waits for Redis, and what counts as Redis being unavailable.

Every Redis call on a request path is optional work with a fallback (dedupe,
leaderboard, login counting): past this timeout the request goes on without it.
"""

from __future__ import annotations

import redis.exceptions

REDIS_TIMEOUT = 0.5
REDIS_ERRORS = (redis.exceptions.RedisError, OSError, TimeoutError)
