"""What a stream lost: the first event up to the relay's position that its Redis stream
lacks, compared with the events table (the relay rewinds to it, ``Relay.reconcile``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import redis.asyncio as aioredis

from sluice.events import utcnow
from sluice.store import Store
from sluice.streams.engine_keys import Keys
from sluice.streams.partitions import payload_partition


async def first_missing(
    store: Store,
    redis: aioredis.Redis,
    keys: Keys,
    aggregate: str,
    position: int,
    *,
    retention_s: int,
) -> int:
    """The seq just before the first event of ``aggregate`` up to ``position`` that its
    partition's stream lacks (``position`` when none is missing)."""
    present = [await _last_seq_in_stream(redis, keys, aggregate, p) for p in keys.numbers]
    if 0 in present:
        floor = await _retention_floor(store, aggregate, position, retention_s)
        present = [p or floor for p in present]
    if keys.partitions == 1:
        expected = await _last_seq_in_db(store, aggregate, position)
        return present[0] if present[0] < expected else position
    # Which partition an event went to is in its payload: read the events above the
    # lowest stream's last seq, up to the first one its stream lacks.
    after = min(present)
    while after < position:
        rows = await store.fetchall(
            "SELECT seq, payload FROM events WHERE aggregate = ? AND seq > ? AND seq <= ?"
            " ORDER BY seq LIMIT 5000",
            (aggregate, after, position),
        )
        for seq, payload in rows:
            partition = payload_partition(aggregate, bytes(payload), keys.partitions)
            if int(seq) > present[partition]:
                return int(seq) - 1
        if len(rows) < 5000:
            break
        after = int(rows[-1][0])
    return position


async def _last_seq_in_db(store: Store, aggregate: str, position: int) -> int:
    row = await store.fetchone(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE aggregate = ? AND seq <= ?",
        (aggregate, position),
    )
    return int(row[0]) if row else 0


async def _last_seq_in_stream(
    redis: aioredis.Redis, keys: Keys, aggregate: str, partition: int
) -> int:
    stream = keys.stream(aggregate, partition)
    entries: Any = await redis.xrevrange(stream, count=1)
    if not entries:
        return 0
    return int(entries[0][1].get(b"seq", 0))


async def _retention_floor(store: Store, aggregate: str, position: int, retention_s: int) -> int:
    """Entries older than the retention may be trimmed; republish what is younger.

    An aggregate with no event that young gets nothing back, as the older entries of
    the others do not. (Taking 0 then rewound the relay to the start of the hot
    history, every aggregate's, for one aggregate quiet for a day.)"""
    since = (utcnow() - timedelta(seconds=retention_s)).isoformat()
    row = await store.fetchone(
        "SELECT MIN(seq) FROM events WHERE aggregate = ? AND created_at >= ?",
        (aggregate, since),
    )
    if row is None or row[0] is None:
        return await _last_seq_in_db(store, aggregate, position)
    return int(row[0]) - 1
