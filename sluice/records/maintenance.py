"""Keep Redis bounded, and report on it: trimming, reaping, status.

Trimming removes entries that every group on the stream has acked and that
are older than the retention, and always keeps a stream's newest entry (the
relay reads it to find out what a restarted Redis still holds). Each partition's
streams are separate streams with their own groups: each is trimmed below what its
own groups have not acked, and reported with its partition (and, on a Redis
Cluster, the primary that holds it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, ResponseError

from sluice.events import AGGREGATES, utcnow
from sluice.records.pause import paused_groups
from sluice.records.stalls import StalledConsumer, stalled_consumers
from sluice.relay.relay import POSITION
from sluice.store import Store
from sluice.streams.engine_keys import Keys
from sluice.streams.partitions import tag

# Keys a SCAN step looks at: the keyspace holds many more keys than streams (view
# dedupe, claims, limits), and the default of 10 costs a round trip per 10 of them.
SCAN_COUNT = 1000


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


async def _partitioned(
    redis: aioredis.Redis, keys: Keys, name_of: Callable[[str, int], str], kind: str
) -> list[tuple[str, int]]:
    """The keys of one kind (``name_of(group, partition)``: retry streams, delayed sets)
    in every partition, with their partition, by one SCAN (not one per partition: each
    walks the whole keyspace, of every primary on a cluster)."""
    heads = {name_of("", p): p for p in keys.numbers}
    pattern = name_of("*", 0)
    if keys.partitions > 1 or keys.tagged:
        # Only the hash tag tells partitions apart; keys of tags not in this
        # deployment's partitions (another partition count) match, and are left out.
        pattern = pattern.replace(f"{{{tag(0, keys.partitions)}}}", "{*}", 1)
    found: list[tuple[str, int]] = []
    async for raw in redis.scan_iter(match=pattern, count=SCAN_COUNT, _type=kind):
        name = _s(raw)
        found += [(name, p) for head, p in heads.items() if name.startswith(head)]
    return sorted(set(found), key=lambda pair: (pair[1], pair[0]))  # SCAN may repeat a key


async def partition_streams(redis: aioredis.Redis, keys: Keys) -> list[tuple[str, int]]:
    """Aggregate streams and retry streams that exist, each with its partition: partition
    by partition, its aggregate streams first."""
    aggregates = [(keys.stream(a, p), p) for p in keys.numbers for a in sorted(AGGREGATES)]
    pipe = redis.pipeline(transaction=False)
    for name, _ in aggregates:
        pipe.exists(name)
    exist: list[Any] = await pipe.execute()
    present = [pair for pair, there in zip(aggregates, exist, strict=True) if there]
    retries = await _partitioned(redis, keys, keys.retry, "stream")
    rank = {name: i for i, (name, _) in enumerate(present)}
    # Sorted is stable: retries keep their name order behind the aggregate streams.
    return sorted(present + retries, key=lambda pair: (pair[1], rank.get(pair[0], len(rank))))


async def dead_letter_groups(redis: aioredis.Redis, keys: Keys) -> set[str]:
    """Every group holding dead letters in Redis, in any partition: those of apps this
    process does not load too (an app removed from the deployment leaves them)."""
    found = await _partitioned(redis, keys, keys.dead, "stream")
    lengths = await _counts(redis, "xlen", [name for name, _ in found])
    return {  # a dead-letter stream whose letters were all dropped stays, empty
        name.removeprefix(keys.dead("", partition))
        for (name, partition), length in zip(found, lengths, strict=True)
        if length
    }


async def all_streams(redis: aioredis.Redis, keys: Keys) -> list[str]:
    """Aggregate streams and retry streams that exist, of every partition."""
    return [name for name, _ in await partition_streams(redis, keys)]


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


async def _passed(redis: aioredis.Redis, stream: str) -> int | None:
    """The seq before the first entry of ``stream`` some group has not acked; None when
    every group acked every entry (or there is no such stream)."""
    try:
        floor = await _groups_floor(redis, stream)
    except ResponseError:
        return None  # no such stream: nothing was published to it
    if floor is None:
        return None
    first: Any = await redis.xrange(stream, min=f"{floor[0]}-{floor[1]}", count=1)
    return int(first[0][1][b"seq"]) - 1 if first else None


async def passed_by_every_group(redis: aioredis.Redis, keys: Keys) -> dict[str, int]:
    """Per aggregate, the highest seq below which every group on its streams has acked
    every entry; aggregates whose streams hold nothing unacked are left out.

    An aggregate's events are spread over its partitions' streams (each event's seq
    in one of them), so its passed seq is the lowest of the partitions that hold
    unacked entries: one lagging partition holds the whole aggregate back.

    A group's failed entries wait in retry streams with their whole event, so they
    count as passed here."""
    passed: dict[str, int] = {}
    for aggregate in sorted(AGGREGATES):
        for partition in keys.numbers:
            seq = await _passed(redis, keys.stream(aggregate, partition))
            if seq is not None:
                passed[aggregate] = min(seq, passed.get(aggregate, seq))
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
    for stream, partition in await partition_streams(redis, keys):
        for group in await group_names(redis, stream):
            for consumer in await redis.xinfo_consumers(stream, group):
                if int(consumer["pending"]) == 0 and int(consumer["idle"]) >= idle_ms:
                    name = _s(consumer["name"])
                    await redis.xgroup_delconsumer(stream, group, name)
                    await redis.hdel(keys.acks(group, partition), name)  # its stall mark
                    reaped.append(f"{stream}/{group}/{name}")
    return reaped


@dataclass
class GroupStatus:
    group: str
    consumers: int
    pending: int
    lag: int | None
    # The group's dead letters in the stream's partition (each partition has its own).
    dead_letters: int
    # Paused by an operator (sluice.records.pause): its consumers take no entries.
    paused: bool = False


@dataclass
class StreamStatus:
    stream: str
    length: int
    partition: int = 0
    # The primary holding the stream ("host:port") on a Redis Cluster; None on one Redis.
    node: str | None = None
    groups: list[GroupStatus] = field(default_factory=list)


@dataclass
class Status:
    """The engine's state at one moment: the relay's backlog, the delayed retries, every
    stream with its groups, the stalled consumers and the paused groups."""

    relay_backlog: int
    delayed: int
    streams: list[StreamStatus]
    # Consumers holding entries that acked none for SLUICE_STALL_SECONDS.
    stalled: list[StalledConsumer] = field(default_factory=list)
    # Every paused group, also one with no stream yet.
    paused: list[str] = field(default_factory=list)


def node_of(redis: aioredis.Redis, key: str) -> str | None:
    """The cluster primary that holds ``key`` (as ``host:port``), from the client's slot
    map; None on one Redis, or when no node covers the slot (a cluster in trouble)."""
    if not isinstance(redis, RedisCluster):
        return None
    try:
        node = redis.get_node_from_key(key)
    except RedisClusterException:
        return None
    return None if node is None else str(node.name)


async def _counts(redis: aioredis.Redis, command: str, names: list[str]) -> list[int]:
    """``command`` (XLEN, ZCARD) on each of ``names``, in one pipeline (one round trip per
    node on a cluster)."""
    pipe = redis.pipeline(transaction=False)
    for name in names:
        getattr(pipe, command)(name)
    return [int(n) for n in await pipe.execute()]


def _group_status(info: Mapping[str, Any]) -> GroupStatus:
    lag = info.get("lag")  # Redis 7 reports lag; 6.2 does not
    return GroupStatus(
        group=_s(info["name"]),
        consumers=int(info["consumers"]),
        pending=int(info["pending"]),
        lag=None if lag is None else int(lag),
        dead_letters=0,
    )


async def status(redis: aioredis.Redis, keys: Keys, store: Store, stall_s: float = 60.0) -> Status:
    """Every stream of every partition with its groups, the delayed retries, and the
    consumers stalled for ``stall_s`` seconds (``sluice.records.stalls``)."""
    backlog = await store.max_seq() - await store.position(POSITION)
    found = await partition_streams(redis, keys)
    pipe = redis.pipeline(transaction=False)
    for name, _ in found:
        pipe.xlen(name)
        pipe.xinfo_groups(name)
    answers: list[Any] = await pipe.execute(raise_on_error=False)
    streams: list[StreamStatus] = []
    for (name, partition), length, infos in zip(found, answers[::2], answers[1::2], strict=True):
        if isinstance(length, Exception) or isinstance(infos, Exception):
            continue  # deleted since it was listed
        groups = [_group_status(info) for info in infos]
        streams.append(StreamStatus(name, int(length), partition, node_of(redis, name), groups))
    places = sorted({(g.group, s.partition) for s in streams for g in s.groups})
    counts = await _counts(redis, "xlen", [keys.dead(group, p) for group, p in places])
    dead = dict(zip(places, counts, strict=True))
    paused = sorted(await paused_groups(store))
    for entry in streams:
        for g in entry.groups:
            g.dead_letters = dead[g.group, entry.partition]
            g.paused = g.group in paused
    delayed = [name for name, _ in await _partitioned(redis, keys, keys.delayed, "zset")]
    # A paused group's entries wait on purpose: its consumers are not stalled.
    holding = [
        (s.stream, g.group, s.partition)
        for s in streams
        for g in s.groups
        if g.pending and not g.paused
    ]
    return Status(
        backlog,
        sum(await _counts(redis, "zcard", delayed)),
        streams,
        await stalled_consumers(redis, keys, holding, stall_s),
        paused,
    )


def group_totals(report: Status) -> list[GroupStatus]:
    """Each group over every stream and partition: pending and lag summed (lag unknown if
    unknown anywhere), dead letters of each partition counted once, and consumers the
    most on one stream (a worker has a consumer of the same name in every partition)."""
    totals: dict[str, GroupStatus] = {}
    dead: dict[tuple[str, int], int] = {}
    for stream in report.streams:
        for g in stream.groups:
            total = totals.setdefault(g.group, GroupStatus(g.group, 0, 0, 0, 0, g.paused))
            total.consumers = max(total.consumers, g.consumers)
            total.pending += g.pending
            total.lag = None if total.lag is None or g.lag is None else total.lag + g.lag
            dead[g.group, stream.partition] = g.dead_letters
    for (group, _), count in dead.items():
        totals[group].dead_letters += count
    return [totals[name] for name in sorted(totals)]
