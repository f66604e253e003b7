"""Stalled consumers (docs/guides/operate.md): a consumer that holds entries and has acked none for
``SLUICE_STALL_SECONDS``.

Each consumer marks the time of its last ack in a hash per group and partition
(``Keys.acks``, unix milliseconds, written in the pipeline of the ack itself; a
consumer's start counts as an ack). Redis's own ``idle`` of a consumer cannot tell:
a hung handler's consumer keeps touching its entries (the runtime resets their idle
time so no one reclaims them), and a blocked read counts as activity. A consumer of
a worker that died holding entries stalls too, until another reclaims them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from sluice.streams.engine_keys import Keys


@dataclass(frozen=True)
class StalledConsumer:
    group: str
    consumer: str
    partition: int
    pending: int  # entries it holds in the partition's streams
    # Seconds since its last ack (or its start); null when it never marked one.
    since_ack_s: float | None


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def stalled_consumers(
    redis: aioredis.Redis,
    keys: Keys,
    places: Iterable[tuple[str, str, int]],
    stall_s: float,
    now: float | None = None,
) -> list[StalledConsumer]:
    """The stalled consumers among those of ``places`` (stream, group, partition): only
    groups with entries pending there need asking."""
    now = time.time() if now is None else now
    holding: dict[tuple[str, int, str], int] = {}
    for stream, group, partition in places:
        try:
            consumers: list[Any] = await redis.xinfo_consumers(stream, group)
        except ResponseError:
            continue  # the stream or group went away since it was listed
        for consumer in consumers:
            if int(consumer["pending"]):
                place = (group, partition, _s(consumer["name"]))
                holding[place] = holding.get(place, 0) + int(consumer["pending"])
    stalled: list[StalledConsumer] = []
    marks: dict[tuple[str, int], dict[Any, Any]] = {}
    for (group, partition, name), pending in sorted(holding.items()):
        if (group, partition) not in marks:
            marks[group, partition] = await redis.hgetall(keys.acks(group, partition))
        mark = marks[group, partition].get(name.encode()) or marks[group, partition].get(name)
        since = None if mark is None else max(0.0, now - int(mark) / 1000)
        if since is None or since >= stall_s:
            stalled.append(StalledConsumer(group, name, partition, pending, since))
    return stalled
