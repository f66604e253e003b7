"""What counts as Redis being unavailable, for every loop that waits it out."""

from __future__ import annotations

import redis.exceptions

# NoScriptError: Redis restarted between a script's load and its run; the next
# call loads it again, so it is an outage like the others, not a bug.
REDIS_DOWN = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.NoScriptError,
    OSError,
)
