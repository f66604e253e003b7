"""Each user's mail budget: ``SLUICE_MAIL_USER_HOURLY`` mails in any hour and
``SLUICE_MAIL_USER_DAILY`` in any 24 hours (0 turns a window off), shared by every
mail worker of every replica through Redis.

One sorted set per user holds the keys of the mails granted, scored by the
time of the grant in Redis's own clock (so hosts' clocks do not matter). One
Lua script drops what is older than the longest window, counts what is left
in each window, and adds the mail when both have room: the windows slide, so
no hour ever holds more than the hourly budget. A mail whose key is in the set
already (a retry after a failed send, a redelivery) passes without being
counted twice.

When Redis does not answer, the budget cannot be checked: ``BudgetUnavailable``
is a ``ServiceUnavailable``, which the consumer holds and runs again with backoff
like the global rate limit's, so no mail goes out unbudgeted and an outage
spends none of the mail's deliveries.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import redis.asyncio as aioredis
import redis.exceptions

from sluice.app import ServiceUnavailable
from sluice.app.advanced import REDIS_DOWN

HOUR_MS, DAY_MS = 3_600_000, 86_400_000

# KEYS[1]: the user's sorted set. ARGV: mail key, hourly budget, daily budget (0: off).
# Replies 0 (granted), 1 (the hour is spent) or 2 (the day is spent).
_SPEND = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hourly, daily = tonumber(ARGV[2]), tonumber(ARGV[3])
local keep = 3600000
if daily > 0 then keep = 86400000 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - keep))
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local windows = {{hourly, 3600000, 1}, {daily, 86400000, 2}}
for _, w in ipairs(windows) do
  if w[1] > 0 then
    local count = redis.call('ZCOUNT', KEYS[1], string.format('(%.0f', now - w[2]), '+inf')
    if count >= w[1] then return w[3] end
  end
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now), ARGV[1])
redis.call('PEXPIRE', KEYS[1], keep)
return 0
"""


class Spent(enum.Enum):
    GRANTED = 0
    HOUR = 1  # the hourly budget is used up
    DAY = 2  # the daily budget is used up


class BudgetUnavailable(ServiceUnavailable):
    """Redis did not answer the budget: a transient failure, retried later."""


class UserBudget:
    """Per-user mail budgets; with both at 0, no limit and no Redis call."""

    def __init__(
        self, redis: aioredis.Redis, key_of: Callable[[str], str], hourly: int, daily: int
    ) -> None:
        self.redis = redis
        self.key_of = key_of  # user id -> its Redis key
        self.hourly = max(0, hourly)
        self.daily = max(0, daily)
        self._script = redis.register_script(_SPEND)

    @property
    def enabled(self) -> bool:
        return bool(self.hourly or self.daily)

    async def spend(self, user_id: str, mail_key: str) -> Spent:
        """Count ``mail_key`` against the user's budget, unless a window is used up."""
        if not self.enabled:
            return Spent.GRANTED
        key = self.key_of(user_id)
        try:
            reply = await self._script(keys=[key], args=[mail_key, self.hourly, self.daily])
        except (redis.exceptions.RedisError, *REDIS_DOWN) as exc:
            raise BudgetUnavailable(f"mail budget unavailable: {exc}") from exc
        return Spent(int(reply))
