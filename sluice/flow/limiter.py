"""A group's flow state in Redis, one script per step (``sluice.flow.scripts``).

``Limiter`` knows event ids, keys and entries (JSON, opaque to it); what an entry is
and where it goes back to is the consumer's side (``sluice.flow.control``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from sluice.flow import scripts
from sluice.flow.spec import Flow, Rate
from sluice.streams.engine_keys import Keys

# Entries released per script run at most: a run stays short however long the queues.
CAP = 100


@dataclass(frozen=True)
class Pumped:
    """What a turn released (entries, as parked), when the next token is due (ms; None:
    nothing waits for a token) and how many keys still have waiting entries."""

    released: list[bytes]
    due_ms: int | None
    waiting_keys: int


def _rate(rate: Rate | None) -> list[Any]:
    if rate is None:
        return [0, 1, 1]
    return [rate.count, rate.per_seconds * 1000, rate.bucket]


class Limiter:
    """One group's slots, buckets and queues (``flow``), with leases of ``lease_ms``."""

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, group: str, flow: Flow, lease_ms: int
    ) -> None:
        self.redis = redis
        self.base = keys.flow(group)
        self.flow = flow
        self._args = [
            self.base,
            lease_ms,
            flow.concurrency or 0,
            *_rate(flow.rate),
            *_rate(flow.total_rate),
        ]
        # The key every script names: the group's slot (the others share its hash tag).
        self._keys = [self.base + "keys"]
        self._acquire = redis.register_script(scripts.ACQUIRE)
        self._release = redis.register_script(scripts.RELEASE)
        self._keep = redis.register_script(scripts.KEEP)
        self._stale = redis.register_script(scripts.STALE)

    async def acquire(
        self, entries: Sequence[tuple[str, str, bool]], entry: Callable[[int], str]
    ) -> list[bool]:
        """For each (event id, key, fresh): True if it may be handled now (it holds a slot
        of its key), False if it was parked (or was parked before); ``fresh``: read from
        its stream for the first time (so neither holding a slot nor parked);
        ``entry(i)``: the JSON parked for the ``i``-th, asked only of those to park."""
        if not entries:
            return []
        flat = [x for i, k, fresh in entries for x in (i, k, "1" if fresh else "0", "")]
        reply = await self._acquire(keys=self._keys, args=[*self._args, *flat])
        answers = [int(x) for x in reply]
        again = [i for i, answer in enumerate(answers) if answer == 2]
        if again:  # to park: their entries now (a slot freed since is taken instead)
            flat = [
                x
                for i in again
                for x in (entries[i][0], entries[i][1], "1" if entries[i][2] else "0", entry(i))
            ]
            reply = await self._acquire(keys=self._keys, args=[*self._args, *flat])
            for i, answer in zip(again, reply, strict=True):
                answers[i] = int(answer)
        return [answer == 1 for answer in answers]

    async def release(self, held: Sequence[tuple[str, str]], cap: int = CAP) -> Pumped:
        """Free the slots of (event id, key), then take turns (``pump``)."""
        by_key: dict[str, list[str]] = {}
        for event_id, key in held:
            by_key.setdefault(key, []).append(event_id)
        flat: list[str | int] = []
        for key, ids in by_key.items():
            flat += [key, len(ids), *ids]
        reply = await self._release(keys=self._keys, args=[*self._args, cap, *flat])
        return Pumped(list(reply[0]), None if int(reply[1]) < 0 else int(reply[1]), int(reply[2]))

    async def pump(self, cap: int = CAP) -> Pumped:
        """Release waiting entries whose key has room, a key at a time in turns."""
        return await self.release((), cap)

    async def keep(self, held: Sequence[tuple[str, str]]) -> int:
        """Start the leases of (event id, key) again: they are still in handling."""
        if not held:
            return 0
        flat = [x for pair in held for x in pair]
        return int(await self._keep(keys=self._keys, args=[*self._args, *flat]))

    async def stale(self, older_ms: int) -> list[bytes]:
        """Released entries not put back on their stream within ``older_ms``."""
        return list(await self._stale(keys=self._keys, args=[*self._args, older_ms]))

    async def put_back(self, event_ids: Sequence[str]) -> None:
        """The released entries are back on their streams."""
        if event_ids:
            await self.redis.hdel(self.base + "released", *event_ids)

    # What operators and tests read.

    async def holding(self, key: str) -> int:
        """Entries of ``key`` in handling (leases not run out)."""
        held = self.base + "held:" + key
        return int(await self.redis.zcount(held, int(time.time() * 1000), "+inf"))

    async def waiting(self, key: str) -> int:
        """Entries of ``key`` parked."""
        return int(await self.redis.llen(self.base + "wait:" + key))

    async def stats(self) -> dict[str, int]:
        """The group's counters: entries ``deferred`` (parked) and ``released``."""
        raw: dict[Any, Any] = await self.redis.hgetall(self.base + "stats")
        return {k.decode(): int(v) for k, v in raw.items()}
