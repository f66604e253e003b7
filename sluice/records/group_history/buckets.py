"""Where a minute of group history lives in Redis, how long, and how a sample is written.

One hash per group, metric and UTC hour (``Keys.history``), whose fields are the
minutes of the hour (``0`` to ``59``) and values the minute's number. Sixty small
integers keep a hash in Redis's compact encoding (a listpack, under the default
``hash-max-listpack-entries`` of 128), which one hash per minute or per day would not.

``handled``, ``failed`` (retries scheduled) and ``dead_lettered`` are counters: each
worker adds its own deltas (``HINCRBY``), so several workers sum. ``lag`` is a gauge:
each sample sets it (``HSET``), so a minute keeps its latest sample.

Each hash expires (``EXPIREAT``) ``RETENTION`` plus ``MARGIN`` after the end of its
hour: a minute is readable for at least 24 hours, and a group never holds more than
``HOURS_KEPT`` hours of hashes per metric, whatever writes them and however long.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis.asyncio as aioredis

from sluice.streams.engine_keys import Keys

COUNTERS = ("handled", "failed", "dead_lettered")
LAG = "lag"
METRICS = (*COUNTERS, LAG)
RETENTION = timedelta(hours=24)
# Hosts' clocks differ from Redis's a little; a minute must outlive its 24 hours anyway.
MARGIN = timedelta(minutes=10)
# The most minutes of group history a read may ask for: all it keeps (24 hours).
MAX_MINUTES = int(RETENTION / timedelta(minutes=1))
HOUR = timedelta(hours=1)
# The hours of one metric a group may hold at once: the current one and those whose
# expiry (hour end + RETENTION + MARGIN) has not come yet.
HOURS_KEPT = 1 + math.ceil((RETENTION + MARGIN) / HOUR)


def minute_of(moment: datetime) -> datetime:
    """The UTC minute holding ``moment``."""
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def hour_label(minute: datetime) -> str:
    """The hour part of a history key: ``2026010112`` (UTC)."""
    return minute.astimezone(UTC).strftime("%Y%m%d%H")


def expire_at(minute: datetime) -> int:
    """When the hash holding ``minute`` expires (Unix seconds): the same for every minute
    of its hour, so writing it again and again changes nothing."""
    hour = minute_of(minute).replace(minute=0)
    return int((hour + HOUR + RETENTION + MARGIN).timestamp())


def window(now: datetime, minutes: int) -> list[datetime]:
    """The last ``minutes`` UTC minutes up to the one holding ``now``, oldest first."""
    last = minute_of(now)
    return [last - timedelta(minutes=back) for back in range(minutes - 1, -1, -1)]


@dataclass
class Counts:
    """One group's outcomes in one minute (or one process's totals)."""

    handled: int = 0
    failed: int = 0
    dead_lettered: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(a + b for a, b in zip(self.values(), other.values(), strict=True)))

    def __sub__(self, other: Counts) -> Counts:
        return Counts(*(a - b for a, b in zip(self.values(), other.values(), strict=True)))

    def __bool__(self) -> bool:
        return any(self.values())

    def values(self) -> tuple[int, int, int]:
        return self.handled, self.failed, self.dead_lettered


# KEYS: one group's hourly hashes. ARGV: the Unix time each key expires at, in KEYS'
# order; then writes of four: 'add' or 'set', the key's index (1-based), field, number.
# One script, so a sample of a group is written whole or not at all: a sample that
# failed is kept and written again without counting part of it twice.
_WRITE = """
local n = #KEYS
for i = n + 1, #ARGV, 4 do
    local key = KEYS[tonumber(ARGV[i + 1])]
    if ARGV[i] == 'set' then
        redis.call('HSET', key, ARGV[i + 2], ARGV[i + 3])
    else
        redis.call('HINCRBY', key, ARGV[i + 2], ARGV[i + 3])
    end
end
for i = 1, n do
    redis.call('EXPIREAT', KEYS[i], ARGV[i])
end
return n
"""


class Writer:
    """Writes samples of groups' history (see the module's docstring)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.keys = keys
        self._script = redis.register_script(_WRITE)

    async def write(
        self, group: str, counts: Mapping[datetime, Counts], lag: tuple[datetime, int] | None
    ) -> None:
        """Add ``counts`` (minute: deltas) to the group's minutes and set the lag of one
        minute; nothing is sent when there is nothing to write."""
        writes: list[tuple[str, datetime, str, int]] = [
            ("add", minute, metric, delta)
            for minute, deltas in counts.items()
            for metric, delta in zip(COUNTERS, deltas.values(), strict=True)
            if delta
        ]
        if lag is not None:
            writes.append(("set", lag[0], LAG, lag[1]))
        if writes:
            await self._run(group, writes)

    async def _run(self, group: str, writes: Iterable[tuple[str, datetime, str, int]]) -> None:
        index: dict[str, int] = {}
        expiry: list[int] = []
        args: list[str | int] = []
        for op, minute, metric, number in writes:
            key = self.keys.history(group, metric, hour_label(minute))
            if key not in index:
                index[key] = len(index) + 1
                expiry.append(expire_at(minute))
            args += [op, index[key], minute.minute, number]
        await self._script(keys=list(index), args=[*expiry, *args])
