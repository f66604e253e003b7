"""The outbox relay: committed events, in ``seq`` order, to Redis Streams.

At-least-once: the position is stored in the database after Redis accepted a
batch, so a crash between the two republishes that batch (consumers dedupe by
event id) and never skips one. For the same reason the position is written
without waiting for the disk (a power cut may take the last few back: those
batches go out again). The next batch is read while one is published, and a batch's
position is written while the next one is published (positions still in order, each
after Redis took its batch; a reconciliation waits for the write, so a rewind is
never overwritten).

A Redis that crashed may come back without its last writes (AOF ``everysec``), and a
cluster replica promoted in a failover may lack the last writes of its primary. The
relay therefore publishes on connections that checked, when they were opened, the
``run_id`` of their server against the one the relay last reconciled with, and never
reconnect by themselves (``sluice.relay.publisher``); a new server gets nothing, and
the relay compares what each stream holds with the database and rewinds to the first
event missing. A connection is to one server process for its life, so no batch can land
on a new server before the comparison and hide the loss. While idle, the relay asks
every partition's server for its ``run_id`` once a poll interval, so a partition that
gets no new events still has a lost tail published again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
import structlog

from sluice.aio.lock import RedisLock
from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait, first_of, wait_or_stop
from sluice.events import AGGREGATES
from sluice.relay.commit_listener import listen_for_commits
from sluice.relay.publisher import Publisher, Sent, ServerChanged
from sluice.relay.reconcile import first_missing
from sluice.store import Store, StoredEvent
from sluice.store.errors import database_unavailable
from sluice.streams.engine_keys import Keys
from sluice.streams.group_setup import ensure_groups
from sluice.telemetry import tracing
from sluice.telemetry.prometheus import RELAY_PUBLISHED

log = structlog.get_logger(__name__)

POSITION = "relay"
_REDIS_DOWN = REDIS_DOWN


# KEYS[1]: any key of the partition (it routes the script to the partition's server).
_RUN_ID = """
return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
"""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _discard(read: asyncio.Future[Any]) -> None:
    """Cancel a read no one will wait for, or take its outcome if it has one."""
    if read.done():
        if not read.cancelled():
            read.exception()
    else:
        read.cancel()


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
        # The write of the last confirmed position, done while the next batch goes out.
        self._saving: asyncio.Future[None] | None = None
        # The batch sent, its replies not read yet: (its last seq, it, its size).
        self._inflight: tuple[int, Sent, int] | None = None
        self._publisher = Publisher(redis, keys)
        self._run_id_script = redis.register_script(_RUN_ID)

    async def close(self) -> None:
        """Confirm the batch in flight and save its position, then close the publishing
        connections (``run`` does this when it returns; a caller of ``publish`` or
        ``run_once`` does it itself)."""
        self._drop_ahead()
        try:
            async with asyncio.timeout(1):
                await self._confirm()
                await self._saved()
        except Exception as exc:  # a timeout too; the next start sends it again: harmless
            log.warning("relay: the last position was not saved", error=str(exc))
        await self._publisher.close()

    async def __aenter__(self) -> Relay:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def publish(self, events: Sequence[StoredEvent]) -> None:
        """XADD ``events`` and wait for Redis to take them; raises ``ServerChanged``
        when a partition's server is new (that server got nothing, the others may have:
        the batch goes out again, and consumers dedupe by event id)."""
        sent = await self.send(events)
        try:
            await self._publisher.confirm(sent)
        except ServerChanged:
            self._run_ids = {}
            raise

    async def send(self, events: Sequence[StoredEvent]) -> Sent:
        """XADD ``events``, one write per server, at once, without reading the replies;
        raises ``ServerChanged`` as ``publish`` does."""
        if not self._run_ids:
            await self.sync_server()
        try:
            if tracing.ENABLED:  # a PRODUCER span per batch, linked to the events' spans
                with tracing.producing(events):
                    return await self._publisher.send(events, self._run_ids)
            return await self._publisher.send(events, self._run_ids)
        except ServerChanged:
            self._run_ids = {}
            raise

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
        """Send the batch after the last one sent, then confirm the one before it (its
        replies read, its position written); returns how many events were sent, or
        confirmed when none were left to send (0: there was nothing to do).

        So Redis works on one batch while the relay reads and packs the next; a batch
        counts as published, and its position is written, once Redis took all of it.
        """
        if not self._run_ids:
            # Reconciled before the position is read: a rewind must not be overwritten
            # by the position of a batch read before it.
            await self.sync_server()
        if self._position is None:
            await self._drop_inflight()
            self._drop_ahead()
            await self._saved()
            self._position = await self.store.position(POSITION)
        after = self._inflight[0] if self._inflight else self._position
        events = await self._read_ahead(after)
        if not events:
            events = await self.store.events_after(after, self.batch)
        if not events:
            return await self._confirm()
        last = events[-1].seq
        # The next batch is read while this one is sent and the previous confirmed; if
        # either fails, the read is dropped (a read ahead of another position is not used).
        self._ahead = (last, asyncio.ensure_future(self.store.events_after(last, self.batch)))
        # The position before the batch in flight is stored before another goes out, so
        # a crash sends again at most two batches: the one in flight and this one.
        await self._saved()
        try:
            sent = await self.send(events)
            await self._confirm()
        except ServerChanged:
            log.warning("relay: redis restarted, checking what it kept")
            self._run_ids = {}
            await self.sync_server()
            return await self.run_once()
        self._inflight = (last, sent, len(events))
        return len(events)

    async def _confirm(self) -> int:
        """Read the replies to the batch in flight and start writing its position;
        returns its size (0 when none is in flight). A failure loses the batch's replies
        (the publisher closed its connections): it is sent again from the position."""
        if self._inflight is None:
            return 0
        last, sent, n = self._inflight
        self._inflight = None
        await self._publisher.confirm(sent)
        # Positions are written one after another, each once Redis took its batch.
        await self._saved()
        self._saving = asyncio.ensure_future(self.store.set_position(POSITION, last, durable=False))
        self._position = last
        self.published += n
        RELAY_PUBLISHED.inc(n)
        return n

    async def _drop_inflight(self) -> None:
        if self._inflight is not None:
            self._inflight = None
            await self._publisher.close()  # no connection may keep its unread replies

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

    async def _saved(self) -> None:
        """Wait for the position being written, if one is; raises what its write did."""
        saving, self._saving = self._saving, None
        if saving is not None:
            await saving

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            _discard(self._ahead[1])
            self._ahead = None

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set; one leader at a time across replicas."""
        listener = asyncio.create_task(listen_for_commits(self.redis, self.keys, self.wake, stop))
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
            await self.close()
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
                with contextlib.suppress(Exception):  # the position is read again
                    await self._saved()
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
        await self._drop_inflight()  # sent again from the position
        await self._saved()  # a position written after the rewind would undo it
        position = await self.store.position(POSITION)
        rewind = position
        for aggregate in sorted(AGGREGATES):
            missing = await first_missing(
                self.store, self.redis, self.keys, aggregate, position, retention_s=self.retention_s
            )
            rewind = min(rewind, missing)
        self._position = None
        if rewind < position:
            log.warning("relay: redis lost entries, republishing", since=rewind, position=position)
            await self.store.set_position(POSITION, rewind)
