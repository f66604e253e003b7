"""Retries and dead letters, each moved atomically by a Lua script.

A failed entry is acked on its stream and added to the group's delayed set in
one script; due entries move from the delayed set to the group's own retry
stream in another; a dead letter is added and acked in a third. No step can
leave an entry both pending and scheduled, or dead and pending.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping

import redis.asyncio as aioredis

from sluice.events import utcnow
from sluice.streams.engine_keys import Keys

_RETRY = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
end
return acked
"""

_DEAD = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 then
  return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
end
return false
"""

_MOVE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(member)))
  redis.call('ZREM', KEYS[1], member)
end
return #due
"""

# Lua: an entry's CARRIED fields as a flat list for XADD, and its event type.
_CARRY = """
local function carried(fields)
  local out = {}
  local kind = ''
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name == 'type' then kind = fields[i + 1] end
    if name == 'event_id' or name == 'seq' or name == 'type' or name == 'trace_id'
       or name == 'data' or name == 'origin' or name == 'traceparent' then
      table.insert(out, name)
      table.insert(out, fields[i + 1])
    end
  end
  return out, kind
end
"""

_REDRIVE = (
    _CARRY
    + """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #entries == 0 then return false end
local out = carried(entries[1][2])
local id = redis.call('XADD', KEYS[2], '*', unpack(out))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
"""
)

# One batch of a bulk redrive: the dead letters after ARGV[1] (exclusive; '-' from the
# start), at most ARGV[2] of them, whose type is ARGV[3] ('' any), go to the retry stream
# as _REDRIVE sends one. Returns {moved, last id looked at ('' none), ids looked at}.
_REDRIVE_MATCHING = (
    _CARRY
    + """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
local moved = 0
local last = ''
for _, entry in ipairs(entries) do
  last = entry[1]
  local out, kind = carried(entry[2])
  if #out > 0 and (ARGV[3] == '' or kind == ARGV[3]) then
    redis.call('XADD', KEYS[2], '*', unpack(out))
    redis.call('XDEL', KEYS[1], entry[1])
    moved = moved + 1
  end
end
return {moved, last, #entries}
"""
)

# Fields carried from the original entry onto retries and dead letters.
CARRIED = ("event_id", "seq", "type", "trace_id", "data", "origin", "traceparent")


def backoff_ms(base_ms: int, deliveries: int, cap_ms: int = 10 * 60_000) -> int:
    """Exponential backoff with full jitter in its upper half: base * 2^(n-1)."""
    ceiling = min(cap_ms, base_ms * 2 ** max(0, deliveries - 1))
    return int(ceiling / 2 + random.random() * ceiling / 2)


class Failures:
    """A group's retries and dead letters in one partition: schedule a retry, dead-letter
    an entry, move due retries to the retry stream, redrive or drop dead letters (each
    move one atomic script)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, group: str, partition: int = 0) -> None:
        """The failures of ``group`` in one partition: every key below is in its slot."""
        self.redis = redis
        self.keys = keys
        self.group = group
        self.partition = partition
        self.delayed_key = keys.delayed(group, partition)
        self.dead_key = keys.dead(group, partition)
        self.retry_key = keys.retry(group, partition)
        self._retry = redis.register_script(_RETRY)
        self._dead = redis.register_script(_DEAD)
        self._move = redis.register_script(_MOVE_DUE)
        self._redrive = redis.register_script(_REDRIVE)
        self._redrive_matching = redis.register_script(_REDRIVE_MATCHING)

    def _carried(self, stream: str, fields: Mapping[str, str]) -> dict[str, str]:
        out = {name: fields[name] for name in CARRIED if name in fields}
        out.setdefault("origin", stream)
        return out

    async def retry(
        self, stream: str, entry_id: str, fields: Mapping[str, str], deliveries: int, delay_ms: int
    ) -> bool:
        """Ack the entry and schedule it ``delay_ms`` from now on the retry stream."""
        carried = self._carried(stream, fields)
        carried["deliveries"] = str(deliveries)
        flat = [x for pair in carried.items() for x in pair]
        # The entry id makes the member unique even for two identical events.
        flat += ["retry_of", entry_id]
        due = int(utcnow().timestamp() * 1000) + delay_ms
        acked = await self._retry(
            keys=[stream, self.delayed_key],
            args=[self.group, entry_id, due, json.dumps(flat)],
        )
        return bool(acked)

    async def dead(
        self, stream: str, entry_id: str, fields: Mapping[str, str], deliveries: int, error: str
    ) -> str | None:
        """Add the entry to the dead letters and ack it, atomically."""
        carried = self._carried(stream, fields)
        carried.update(
            group=self.group,
            error=error[:2000],
            deliveries=str(deliveries),
            failed_at=utcnow().isoformat().replace("+00:00", "Z"),
            source_id=entry_id,
        )
        flat = [x for pair in carried.items() for x in pair]
        result = await self._dead(keys=[stream, self.dead_key], args=[self.group, entry_id, *flat])
        return result.decode() if isinstance(result, bytes) else None

    async def move_due(self, limit: int = 500, *, until_ms: int | None = None) -> int:
        """Move the retries due by now (by ``until_ms``, unix ms, if given: the test
        harness skips the backoff) to the retry stream; how many were moved."""
        now = int(utcnow().timestamp() * 1000) if until_ms is None else until_ms
        moved = await self._move(keys=[self.delayed_key, self.retry_key], args=[now, limit])
        return int(moved)

    async def redrive(self, dead_id: str) -> str | None:
        """Send a dead letter back to its group (fresh delivery count); None if unknown."""
        result = await self._redrive(keys=[self.dead_key, self.retry_key], args=[dead_id])
        return result.decode() if isinstance(result, bytes) else None

    async def redrive_matching(self, event_type: str | None, batch: int = 500) -> int:
        """Send every dead letter of ``event_type`` (None: of any type) back to the group,
        a batch per script run (each atomic: a letter is moved once, even by two operators
        at once); how many were moved."""
        moved, after = 0, "-"
        while True:
            result = await self._redrive_matching(
                keys=[self.dead_key, self.retry_key], args=[after, batch, event_type or ""]
            )
            count, last, seen = int(result[0]), result[1], int(result[2])
            moved += count
            if seen < batch:
                return moved
            after = "(" + (last.decode() if isinstance(last, bytes) else str(last))

    async def drop(self, dead_id: str) -> bool:
        """Delete one dead letter for good; False when it was not there."""
        return bool(await self.redis.xdel(self.dead_key, dead_id))
