"""The outbox relay: committed events, in ``seq`` order, to Redis Streams.

At-least-once: the position is stored in the database after Redis accepted a
batch, so a crash between the two republishes that batch (consumers dedupe by
event id) and never skips one. For the same reason the position is written
without waiting for the disk (a power cut may take the last few back: those
batches go out again), and the next batch is read while it is written.

A Redis that crashed may come back without its last writes (AOF ``everysec``), and a
cluster replica promoted in a failover may lack the last writes of its primary. The
relay therefore publishes each partition's share of a batch with one Lua script, which
first checks the ``run_id`` of the server holding that partition against the one the
relay last reconciled with; on a new server the script writes nothing, and the relay
compares what each stream holds with the database and rewinds to the first event
missing. Checking in the same script as the XADDs leaves no gap in which a batch could
land on a new server before the comparison and hide the loss. While idle, the relay
asks every partition's server for its ``run_id`` once a poll interval, so a partition
that gets no new events still has a lost tail published again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import msgspec
import redis.asyncio as aioredis
import redis.exceptions
import structlog

from sluice.events import AGGREGATES, utcnow
from sluice.metrics import RELAY_PUBLISHED
from sluice.redis_cluster import refresh_topology
from sluice.store import Store, StoredEvent
from sluice.store.errors import database_unavailable
from sluice.streams.group_setup import ensure_groups
from sluice.streams.keys import Keys
from sluice.streams.lock import RedisLock
from sluice.streams.outage import REDIS_DOWN
from sluice.streams.partitions import payload_partition
from sluice.streams.waiting import cancel_and_wait, first_of, wait_or_stop

log = structlog.get_logger(__name__)

POSITION = "relay"
_REDIS_DOWN = REDIS_DOWN


# KEYS: the batch's streams; ARGV[1]: expected run_id; ARGV[2]: the events, msgpack:
# one array [stream index in KEYS, event_id, seq, type, trace_id, data] per event.
# One argument for the batch rather than five per event: packing thousands of
# arguments was most of the relay's CPU.
_PUBLISH = """
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
if run_id ~= ARGV[1] then
  return redis.error_reply('STALE_SERVER ' .. tostring(run_id))
end
local events = cmsgpack.unpack(ARGV[2])
for _, e in ipairs(events) do
  redis.call('XADD', KEYS[e[1]], '*', 'event_id', e[2], 'seq', e[3],
             'type', e[4], 'trace_id', e[5], 'data', e[6])
end
return #events
"""
# KEYS[1]: any key of the partition (it routes the script to the partition's server).
_RUN_ID = """
return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
"""
_msgpack = msgspec.msgpack.Encoder()


def _msgpack_str(data: bytes) -> msgspec.Raw:
    """``data`` as a msgpack str, byte for byte: Redis's cmsgpack reads no bin type."""
    n = len(data)
    if n < 32:
        head = bytes((0xA0 | n,))
    elif n < 0x100:
        head = b"\xd9" + n.to_bytes(1, "big")
    elif n < 0x10000:
        head = b"\xda" + n.to_bytes(2, "big")
    else:
        head = b"\xdb" + n.to_bytes(4, "big")
    return msgspec.Raw(head + data)


def _pack(keys: Keys, events: Sequence[StoredEvent]) -> dict[int, tuple[list[str], bytes]]:
    """Per partition: the streams its events go to, and the events packed for the script."""
    parts: dict[int, tuple[dict[str, int], list[tuple[Any, ...]]]] = {}
    for e in events:
        partition = payload_partition(e.aggregate, e.payload, keys.partitions)
        streams, rows = parts.setdefault(partition, ({}, []))
        key = keys.stream(e.aggregate, partition)
        index = streams.setdefault(key, len(streams) + 1)  # Lua counts from 1
        rows.append((index, e.event_id, str(e.seq), e.type, e.trace_id, _msgpack_str(e.payload)))
    return {p: (list(streams), _msgpack.encode(rows)) for p, (streams, rows) in parts.items()}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _discard(read: asyncio.Future[Any]) -> None:
    """Cancel a read no one will wait for, or take its outcome if it has one."""
    if read.done():
        if not read.cancelled():
            read.exception()
    else:
        read.cancel()


class ServerChanged(Exception):
    """Redis is not the server the relay reconciled with; nothing was written."""


class Relay:
    def __init__(
        self,
        store: Store,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        batch: int = 500,
        poll_ms: int = 1000,
        retention_s: int = 86_400,
        wake: asyncio.Event | None = None,
        groups: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.store = store
        self.redis = redis
        self.keys = keys
        self.batch = batch
        self.poll = poll_ms / 1000
        self.retention_s = retention_s
        self.wake = wake or asyncio.Event()
        # Every registered group (name: the aggregates it reads), made on its streams before
        # the first publish to a server: see sluice.streams.group_setup.
        self.groups = dict(groups or {})
        self.lock = RedisLock(redis, keys.relay_lock(), ttl_ms=10_000)
        self.published = 0
        # Per partition, the run_id of the server holding it when the relay reconciled.
        self._run_ids: dict[int, str] = {}
        # The stored position as this relay last read or wrote it; only the leader writes
        # it, so it is read from the database once per leadership, not once per batch.
        self._position: int | None = None
        # The read of the batch after a position, started while that position is saved.
        self._ahead: tuple[int, asyncio.Future[list[StoredEvent]]] | None = None
        self._publish = redis.register_script(_PUBLISH)
        self._run_id_script = redis.register_script(_RUN_ID)

    async def publish(self, events: Sequence[StoredEvent]) -> None:
        """XADD ``events``, one script per partition, at once; raises ``ServerChanged``
        when a partition's server is new (that partition got nothing, the others may
        have: the batch goes out again, and consumers dedupe by event id)."""
        if not self._run_ids:
            await self.sync_server()
        parts = _pack(self.keys, events)
        outcomes = await asyncio.gather(
            *(
                self._publish(keys=keys, args=[self._run_ids.get(p, ""), packed])
                for p, (keys, packed) in parts.items()
            ),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        stale = [e for e in errors if "STALE_SERVER" in str(e)]
        if stale:
            self._run_ids = {}
            raise ServerChanged(str(stale[0]))
        if errors:
            raise errors[0]

    async def servers_changed(self) -> bool:
        """Whether a partition's server is not the one the relay reconciled with (False
        before it reconciled: its first publish does that)."""
        if not self._run_ids:
            return False
        return await self._current_run_ids() != self._run_ids

    async def _current_run_ids(self) -> dict[int, str]:
        ids = await asyncio.gather(
            *(self._run_id_script(keys=[self.keys.space(p)]) for p in self.keys.numbers)
        )
        return {p: _text(i) for p, i in zip(self.keys.numbers, ids, strict=True)}

    async def run_once(self) -> int:
        """Publish one batch after the stored position; returns how many were sent."""
        if not self._run_ids:
            # Reconciled before the position is read: a rewind must not be overwritten
            # by the position of a batch read before it.
            await self.sync_server()
        if self._position is None:
            self._drop_ahead()
            self._position = await self.store.position(POSITION)
        events = await self._read_ahead(self._position)
        if not events:
            events = await self.store.events_after(self._position, self.batch)
        if not events:
            return 0
        try:
            await self.publish(events)
        except ServerChanged:
            log.warning("relay: redis restarted, checking what it kept")
            await self.sync_server()
            return await self.run_once()
        last = events[-1].seq
        # The next batch is read while this position is written; if the write fails,
        # the read is dropped with the position (the next run reads it again).
        self._ahead = (last, asyncio.ensure_future(self.store.events_after(last, self.batch)))
        await self.store.set_position(POSITION, last, durable=False)
        self._position = last
        self.published += len(events)
        RELAY_PUBLISHED.inc(len(events))
        return len(events)

    async def _read_ahead(self, position: int) -> list[StoredEvent]:
        """The batch read ahead after ``position``, if there is one; an empty one is not
        trusted (a commit may have come since), the caller reads again."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return []
        after, read = ahead
        if after != position:
            _discard(read)
            return []
        try:
            return await read
        except Exception:
            return []  # read again, the caller's way, and fail there if it must

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            _discard(self._ahead[1])
            self._ahead = None

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set; one leader at a time across replicas."""
        listener = asyncio.create_task(self._listen(stop))
        backoff = 0.1
        try:
            while not stop.is_set():
                try:
                    await self._lead(stop)
                    backoff = 0.1
                except _REDIS_DOWN as exc:
                    log.warning("relay: redis unavailable", error=str(exc), retry_in=backoff)
                    await wait_or_stop(stop, backoff)
                    backoff = min(backoff * 2, 5.0)
        finally:
            self._drop_ahead()
            await cancel_and_wait(listener)
            with contextlib.suppress(*_REDIS_DOWN, redis.exceptions.RedisError):
                await self.lock.release()

    async def _lead(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and not await self.lock.acquire():
            await wait_or_stop(stop, self.lock.ttl_ms / 3000)
        if stop.is_set():
            return
        log.info("relay: leading")
        self._run_ids = {}  # reconcile first: Redis may have changed while we stood by
        self._position = None  # and another leader may have moved the position
        renewed = asyncio.get_running_loop().time()
        backoff = 0.1
        while not stop.is_set():
            now = asyncio.get_running_loop().time()
            if now - renewed > self.lock.ttl_ms / 3000:
                if not await self.lock.renew():
                    log.warning("relay: lost the lock, standing by")
                    return
                renewed = now
            # Cleared before the read, not after an empty one: a commit announced
            # while the read ran must not wait for the next poll.
            self.wake.clear()
            try:
                sent = await self.run_once()
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                # Keep the lock (renewed above between waits) and try again; the
                # position is read again, the database may have been restored.
                log.warning("relay: database unavailable", error=str(exc), retry_in=backoff)
                self._position = None
                self._drop_ahead()
                await wait_or_stop(stop, backoff)
                backoff = min(backoff * 2, self.lock.ttl_ms / 5000)
                continue
            backoff = 0.1
            if sent == 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll):
                        await first_of(self.wake, stop)
                if not self.wake.is_set() and await self.servers_changed():
                    log.warning("relay: a redis server changed, checking what it kept")
                    await self.sync_server()

    async def sync_server(self) -> None:
        """Reconcile with the Redis servers that answer now, make sure every registered
        group exists there (a new server has none), and remember their run_ids."""
        run_ids = await self._current_run_ids()
        await ensure_groups(self.redis, self.keys, self.groups)
        await self.reconcile()
        self._run_ids = run_ids

    async def reconcile(self) -> None:
        """Rewind to the first event that a stream should hold but doesn't."""
        position = await self.store.position(POSITION)
        rewind = position
        for aggregate in sorted(AGGREGATES):
            rewind = min(rewind, await self._first_missing(aggregate, position))
        self._position = None
        if rewind < position:
            log.warning("relay: redis lost entries, republishing", since=rewind, position=position)
            await self.store.set_position(POSITION, rewind)

    async def _first_missing(self, aggregate: str, position: int) -> int:
        """The seq just before the first event of ``aggregate`` up to ``position`` that its
        partition's stream lacks (``position`` when none is missing)."""
        present = [await self._last_seq_in_stream(aggregate, p) for p in self.keys.numbers]
        if 0 in present:
            floor = await self._retention_floor(aggregate)
            present = [p or floor for p in present]
        if self.keys.partitions == 1:
            expected = await self._last_seq_in_db(aggregate, position)
            return present[0] if present[0] < expected else position
        # Which partition an event went to is in its payload: read the events above the
        # lowest stream's last seq, up to the first one its stream lacks.
        after = min(present)
        while after < position:
            rows = await self.store.fetchall(
                "SELECT seq, payload FROM events WHERE aggregate = ? AND seq > ? AND seq <= ?"
                " ORDER BY seq LIMIT 5000",
                (aggregate, after, position),
            )
            for seq, payload in rows:
                partition = payload_partition(aggregate, bytes(payload), self.keys.partitions)
                if int(seq) > present[partition]:
                    return int(seq) - 1
            if len(rows) < 5000:
                break
            after = int(rows[-1][0])
        return position

    async def _last_seq_in_db(self, aggregate: str, position: int) -> int:
        row = await self.store.fetchone(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE aggregate = ? AND seq <= ?",
            (aggregate, position),
        )
        return int(row[0]) if row else 0

    async def _last_seq_in_stream(self, aggregate: str, partition: int) -> int:
        stream = self.keys.stream(aggregate, partition)
        entries: Any = await self.redis.xrevrange(stream, count=1)
        if not entries:
            return 0
        return int(entries[0][1].get(b"seq", 0))

    async def _retention_floor(self, aggregate: str) -> int:
        """Entries older than the retention may be trimmed; republish what is younger."""
        since = (utcnow() - timedelta(seconds=self.retention_s)).isoformat()
        row = await self.store.fetchone(
            "SELECT COALESCE(MIN(seq), 1) - 1 FROM events WHERE aggregate = ? AND created_at >= ?",
            (aggregate, since),
        )
        return int(row[0]) if row else 0

    async def _listen(self, stop: asyncio.Event) -> None:
        """Wake on commits announced by other processes; reconnects after outages. It
        never ends before ``stop``: without it the relay still polls, but later."""
        while not stop.is_set():
            try:
                # On a cluster: the channel's node as it is now, not as it was.
                await refresh_topology(self.redis)
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(self.keys.outbox_channel())
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self.wake.set()
            except _REDIS_DOWN:
                await wait_or_stop(stop, 1.0)
            except Exception:
                log.exception("relay: commit listener failed, subscribing again")
                await wait_or_stop(stop, 1.0)
