"""Which partition an event goes to, and the hash tag of each partition's keys.

A stream of an aggregate type is split into ``SLUICE_STREAM_PARTITIONS`` streams. An
event's partition is a stable hash (CRC-32) of its aggregate's id (a link's code, an
article's id, a user's id...) modulo the partition count, so every event of one
aggregate lands in one stream, in commit order. The id is read from the payload the
event was stored with, so the database needs no column for it and archived or old
events route the same way.

On a Redis Cluster every key of one partition (its aggregate streams, the groups'
retry streams, delayed sets and dead letters) carries one hash tag, so each script and
each ``XREADGROUP`` touches one slot; the tags are chosen so that partition ``p``'s slot
falls in the ``p``-th of ``P`` equal slot ranges, which spreads the partitions over the
primaries whichever way the cluster assigned its slots in ranges (naive tags such as
``{p0}``, ``{p1}`` hash to arbitrary slots and may clump on one primary).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import msgspec
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from sluice.events import AGGREGATES


def _key_decoder(field: str) -> Callable[[bytes], str]:
    """Reads one field of a payload, skipping the rest (no whole event is built)."""
    decoder = msgspec.json.Decoder(msgspec.defstruct("Key", [(field, str)]))

    def key(payload: bytes) -> str:
        return str(getattr(decoder.decode(payload), field))

    return key


@functools.cache
def _key_of(aggregate: str) -> Callable[[bytes], str]:
    """The reader of ``aggregate``'s id field (``sluice.events.AGGREGATES``: sluice's and
    every loaded app's aggregates, each with the field naming its id)."""
    return _key_decoder(AGGREGATES[aggregate])


def partition_of(aggregate_id: str, partitions: int) -> int:
    """The partition of an aggregate, by its id."""
    if partitions == 1:
        return 0
    return zlib.crc32(aggregate_id.encode()) % partitions


def payload_partition(aggregate: str, payload: bytes, partitions: int) -> int:
    """The partition of a stored event, from its aggregate type and payload."""
    if partitions == 1:
        return 0
    return partition_of(_key_of(aggregate)(payload), partitions)


@functools.cache
def tag(partition: int, partitions: int) -> str:
    """A short hash tag whose slot is in the ``partition``-th of ``partitions`` ranges."""
    if not 0 <= partition < partitions <= REDIS_CLUSTER_HASH_SLOTS:
        raise ValueError(f"partition {partition} of {partitions}")
    low = partition * REDIS_CLUSTER_HASH_SLOTS // partitions
    high = (partition + 1) * REDIS_CLUSTER_HASH_SLOTS // partitions
    for n in range(1_000_000):
        candidate = f"{partition}.{n}"
        if low <= key_slot(candidate.encode()) < high:
            return candidate
    raise AssertionError(f"no tag found for partition {partition} of {partitions}")
