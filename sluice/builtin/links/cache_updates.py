"""What keeps every replica's link cache current (``sluice.builtin.links.cache``): the
``LinkFollower`` reading the links stream of every partition (the durable path), the
``ChangeHints`` this process publishes after its commits and every replica's
``ChangeListener`` (the fast path). The cache module's docstring tells how they combine.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
import structlog
from redis.typing import KeyT, StreamIdT

from sluice.app.advanced import cancel_and_wait, refresh_topology, slot_groups
from sluice.builtin.links.cache import LinkCache, apply_entry

log = structlog.get_logger(__name__)

# RedisClusterException: a cluster client's own (no node reachable, a slot not served).
_REDIS_DOWN = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    OSError,
    TimeoutError,
)
_FIRST_BACKOFF = 0.05
_CODES_PER_HINT = 100


class LinkFollower:
    """Follows the links stream of every partition with plain ``XREAD`` and applies each
    change to the cache.

    One reader per group of streams that one ``XREAD`` may read (all of them on a single
    Redis, each partition's on a cluster), each reconnecting on its own: a primary's
    failover stops only the readers of its partitions.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        streams: Sequence[str],
        cache: LinkCache,
        *,
        block_ms: int = 5_000,
        max_backoff: float = 1.0,
    ) -> None:
        if isinstance(streams, str):
            raise TypeError("streams: a sequence of stream names, one per partition")
        self._redis = redis
        self._groups = slot_groups(redis, streams)
        self._cache = cache
        self._block_ms = block_ms
        self._max_backoff = max_backoff
        self._reading: set[int] = set()  # the readers connected and reading
        self.following = asyncio.Event()  # set while every reader is connected and reading
        self.connections = 0  # the readers' connections and reconnections

    async def run(self) -> None:
        """Follow until cancelled; a reader reconnects with capped backoff while its Redis
        is down."""
        readers = []
        for number, streams in enumerate(self._groups):
            reading = asyncio.Event()
            follow = functools.partial(self._follow, number, streams, reading)
            readers.append(
                asyncio.create_task(
                    _reconnecting(
                        follow, reading, "link follower lost redis, reconnecting", self._max_backoff
                    )
                )
            )
        try:
            await asyncio.gather(*readers)
        finally:
            # Not a TaskGroup: it cancels its tasks once, and a cancellation redis-py lost
            # (see cancel_and_wait) left a reader running and the API's stop waiting.
            for reader in readers:
                await cancel_and_wait(reader)

    async def _follow(self, number: int, streams: list[str], reading: asyncio.Event) -> None:
        # The current end of each stream first, then clear: every change at or before
        # that point is committed, so a read after the clear sees it, and every later
        # one is read below. (Any reader's clear is a clear of every partition's codes.)
        ends = await asyncio.gather(*(self._stream_end(stream) for stream in streams))
        after: dict[KeyT, StreamIdT] = dict(zip(streams, ends, strict=True))
        self._cache.clear()
        self.connections += 1
        reading.set()
        self._reading.add(number)
        if len(self._reading) == len(self._groups):
            self.following.set()
        log.info("link follower reading", streams=streams, after=list(after.values()))
        try:
            while True:
                reply: Any = await self._redis.xread(after, count=500, block=self._block_ms)
                for stream, entries in reply or ():
                    name = stream.decode() if isinstance(stream, bytes) else stream
                    for entry_id, fields in entries:
                        apply_entry(self._cache, fields)
                        after[name] = entry_id
        finally:
            self._reading.discard(number)
            self.following.clear()

    async def _stream_end(self, stream: str) -> bytes | str:
        """The id of the stream's last entry: ``$`` pinned, so no entry falls between reads."""
        newest: Any = await self._redis.xrevrange(stream, count=1)
        return newest[0][0] if newest else "0-0"


class ChangeHints:
    """Publishes the code of each committed link change, for every replica's
    ``ChangeListener``. Coalesced, at most one round trip in flight, never awaited by
    the request and never failing it: while Redis is down the links stream brings the
    change once the relay publishes it."""

    def __init__(self, redis: aioredis.Redis, channel: str, origin: str) -> None:
        self._redis = redis
        self._channel = channel
        self._origin = origin  # so this process's listener skips its own hints
        self._pending: dict[str, None] = {}  # codes in the order they changed
        self._task: asyncio.Task[None] | None = None

    def publish(self, code: str) -> None:
        self._pending[code] = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._publish())

    async def _publish(self) -> None:
        while self._pending:
            codes, self._pending = list(self._pending), {}
            # Sent again at once after a failure: a hint is idempotent, and the first
            # command on a dead pooled connection (a restarted Redis, a cluster node
            # failed over) fails where the next one, on a new connection, goes through.
            try:
                await self._send(codes)
            except _REDIS_DOWN:
                try:
                    await self._send(codes)
                except _REDIS_DOWN as exc:
                    log.warning("link change hints not sent", codes=len(codes), error=repr(exc))

    async def _send(self, codes: list[str]) -> None:
        # Many codes a message, not a message each in a pipeline: a cluster client
        # refuses PUBLISH in a pipeline. (A listener of the release before reads a
        # message of two codes or more as one unknown code; the stream brings those.)
        for start in range(0, len(codes), _CODES_PER_HINT):
            chunk = codes[start : start + _CODES_PER_HINT]
            await self._redis.publish(self._channel, " ".join([self._origin, *chunk]))

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)


class ChangeListener:
    """Forgets each code another process published as changed (hints ``"<origin> <code>
    [<code>...]"``; its own, from ``origin``, were forgotten when they committed)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        channel: str,
        cache: LinkCache,
        origin: str,
        *,
        max_backoff: float = 1.0,
    ) -> None:
        self._redis = redis
        self._channel = channel
        self._cache = cache
        self._origin = origin
        self._max_backoff = max_backoff
        self.listening = asyncio.Event()  # set while subscribed
        self.subscriptions = 0

    async def run(self) -> None:
        """Listen until cancelled; resubscribe with capped backoff while Redis is down."""
        await _reconnecting(
            self._listen,
            self.listening,
            "link change listener lost redis, resubscribing",
            self._max_backoff,
        )

    async def _listen(self) -> None:
        # On a cluster the subscription goes to the channel's slot owner as last known:
        # after that node died, only a fresh slot map leads to its successor.
        await refresh_topology(self._redis)
        async with self._redis.pubsub() as pubsub:
            await pubsub.subscribe(self._channel)
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                if message["type"] == "message":
                    self._hint(bytes(message["data"]).decode(errors="replace"))
                elif message["type"] == "subscribe":  # Redis confirmed it
                    if self.subscriptions:  # hints may have been lost meanwhile
                        self._cache.clear()
                    self.subscriptions += 1
                    self.listening.set()

    def _hint(self, text: str) -> None:
        origin, *codes = text.split(" ")
        if origin != self._origin:
            for code in filter(None, codes):
                self._cache.forget(code)


async def _reconnecting(
    connect: Callable[[], Awaitable[None]],
    connected: asyncio.Event,
    lost: str,
    max_backoff: float,
) -> None:
    """Run ``connect`` until cancelled; while Redis is down, again after a backoff that
    doubles up to ``max_backoff``. ``connect`` sets ``connected`` once it reads; after
    that, a loss starts the backoff over."""
    delay = _FIRST_BACKOFF
    while True:
        try:
            await connect()
        except _REDIS_DOWN as exc:
            if connected.is_set():
                log.warning(lost, error=repr(exc))
                delay = _FIRST_BACKOFF
            connected.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_backoff)
