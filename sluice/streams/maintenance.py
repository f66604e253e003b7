"""Keep Redis bounded, and report on it: trimming, reaping, status.

Trimming removes entries that every group on the stream has acked and that
are older than the retention, and always keeps a stream's newest entry (the
relay reads it to find out what a restarted Redis still holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from sluice.events import AGGREGATES, utcnow
from sluice.store import Store
from sluice.streams.keys import Keys
from sluice.streams.relay import POSITION


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _next_id(entry_id: str) -> str:
    ms, seq = _id_key(entry_id)
    return f"{ms}-{seq + 1}"


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def group_names(redis: aioredis.Redis, stream: str) -> list[str]:
    try:
        groups = await redis.xinfo_groups(stream)
    except ResponseError:
        return []  # no such stream
    return [_s(g["name"]) for g in groups]


async def all_streams(redis: aioredis.Redis, keys: Keys) -> list[str]:
    """Aggregate streams and retry streams that exist."""
    names = [keys.stream(a) for a in sorted(AGGREGATES)]
    names += sorted([_s(k) async for k in redis.scan_iter(match=keys.retry("*"), _type="stream")])
    return [n for n in names if await redis.exists(n)]


async def trim_threshold(redis: aioredis.Redis, stream: str, retention_s: int) -> str | None:
    """The lowest id that must stay: nothing below it is unacked, recent, or the newest."""
    newest = await redis.xrevrange(stream, count=1)
    if not newest:
        return None
    cutoff_ms = int((utcnow().timestamp() - retention_s) * 1000)
    floor = min(_id_key(f"{cutoff_ms}-0"), _id_key(_s(newest[0][0])))
    passed = await _groups_floor(redis, stream)
    if passed is not None:
        floor = min(floor, passed)
    return f"{floor[0]}-{floor[1]}"


async def _groups_floor(redis: aioredis.Redis, stream: str) -> tuple[int, int] | None:
    """The lowest id some group has not acked (pending, or not delivered yet)."""
    floor: tuple[int, int] | None = None
    for group in await redis.xinfo_groups(stream):
        summary = await redis.xpending(stream, _s(group["name"]))
        lowest = _id_key(_next_id(_s(group["last-delivered-id"])))
        if summary["pending"]:
            lowest = min(lowest, _id_key(_s(summary["min"])))
        floor = lowest if floor is None else min(floor, lowest)
    return floor


async def passed_by_every_group(redis: aioredis.Redis, keys: Keys) -> dict[str, int]:
    """Per aggregate, the highest seq below which every group on its stream has acked
    every entry; aggregates whose stream holds nothing unacked are left out.

    A group's failed entries wait in retry streams with their whole event, so they
    count as passed here."""
    passed: dict[str, int] = {}
    for aggregate in sorted(AGGREGATES):
        stream = keys.stream(aggregate)
        try:
            floor = await _groups_floor(redis, stream)
        except ResponseError:
            continue  # no such stream: nothing was published for it
        if floor is None:
            continue
        first: Any = await redis.xrange(stream, min=f"{floor[0]}-{floor[1]}", count=1)
        if first:
            passed[aggregate] = int(first[0][1][b"seq"]) - 1
    return passed


async def trim_stream(redis: aioredis.Redis, stream: str, retention_s: int) -> int | None:
    """Trim one stream below its threshold; how many entries it lost (None: it is empty)."""
    threshold = await trim_threshold(redis, stream, retention_s)
    if threshold is None:
        return None
    return int(await redis.xtrim(stream, minid=threshold, approximate=False))


async def trim_streams(redis: aioredis.Redis, keys: Keys, retention_s: int) -> dict[str, int]:
    """Trim every stream; returns how many entries each lost."""
    removed: dict[str, int] = {}
    for stream in await all_streams(redis, keys):
        lost = await trim_stream(redis, stream, retention_s)
        if lost is not None:
            removed[stream] = lost
    return removed


async def reap_consumers(redis: aioredis.Redis, keys: Keys, idle_ms: int) -> list[str]:
    """Remove consumers idle for ``idle_ms`` with nothing pending; returns group/name."""
    reaped: list[str] = []
    for stream in await all_streams(redis, keys):
        for group in await group_names(redis, stream):
            for consumer in await redis.xinfo_consumers(stream, group):
                if int(consumer["pending"]) == 0 and int(consumer["idle"]) >= idle_ms:
                    name = _s(consumer["name"])
                    await redis.xgroup_delconsumer(stream, group, name)
                    reaped.append(f"{stream}/{group}/{name}")
    return reaped


@dataclass
class GroupStatus:
    group: str
    consumers: int
    pending: int
    lag: int | None
    dead_letters: int


@dataclass
class StreamStatus:
    stream: str
    length: int
    groups: list[GroupStatus] = field(default_factory=list)


@dataclass
class Status:
    relay_backlog: int
    delayed: int
    streams: list[StreamStatus]


async def status(redis: aioredis.Redis, keys: Keys, store: Store) -> Status:
    backlog = await store.max_seq() - await store.position(POSITION)
    streams: list[StreamStatus] = []
    delayed = 0
    for stream in await all_streams(redis, keys):
        entry = StreamStatus(stream, int(await redis.xlen(stream)))
        for group in await redis.xinfo_groups(stream):
            name = _s(group["name"])
            lag = group.get("lag")
            entry.groups.append(
                GroupStatus(
                    group=name,
                    consumers=int(group["consumers"]),
                    pending=int(group["pending"]),
                    lag=None if lag is None else int(lag),
                    dead_letters=int(await redis.xlen(keys.dead(name))),
                )
            )
        streams.append(entry)
    async for key in redis.scan_iter(match=keys.delayed("*")):
        delayed += int(await redis.zcard(key))
    return Status(relay_backlog=backlog, delayed=delayed, streams=streams)
