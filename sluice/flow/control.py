"""Flow control in a consumer (``sluice.consumers.consumer``): what it does with a read
of a group declared with ``flow=``.

Each entry's key is asked of the event; the keyed entries of a read go to the group's
limiter in one script. An entry that may not start now (its key's slots are taken,
its bucket is dry, or its key has entries waiting before it) is parked in Redis and
acked on its stream: waiting is no attempt, so it is stored with the deliveries it had
before this read, never retried nor dead-lettered for it, and entries of other keys
go on. When a slot or a token frees, the limiter releases parked entries in turns
between keys, and the consumer that released one puts it back on the group's retry
stream of its partition, already holding its slot. A released entry whose releaser
died before putting it back is put back by a sweep (its handler may then see it
twice, as after any crash: handlers are idempotent).

The slot an entry holds has a lease of the group's claim idle time, renewed while it
is handled: a killed worker's slots free when its entries become reclaimable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.flow.limiter import Limiter, Pumped
from sluice.flow.spec import Flow
from sluice.streams.engine_keys import Keys
from sluice.streams.failures import CARRIED
from sluice.streams.messages import Delivery, EntryKey, Message
from sluice.streams.spec import RuntimeSettings
from sluice.telemetry.prometheus import FLOW_DEFERRED

log = structlog.get_logger(__name__)

# A released entry not back on its stream after this long is put back by the sweep.
STALE_MS = 30_000
# The turns of a group run at least this often in each worker while keys wait (s).
TICK_S = 0.1


class FlowControl:
    """One consumer's side of its group's flow control (see the module docstring)."""

    def __init__(
        self,
        flow: Flow,
        redis: aioredis.Redis,
        keys: Keys,
        group: str,
        partition: int,
        settings: RuntimeSettings,
    ) -> None:
        self.limiter = Limiter(redis, keys, group, flow, settings.claim_idle_ms)
        self.key_of = flow.key_of()
        self.redis = redis
        self.keys = keys
        self.group = group
        self.partition = partition
        self.settings = settings
        # The entries in handling that hold a slot: (event id, key).
        self._holding: dict[EntryKey, tuple[str, str]] = {}
        self._swept = time.monotonic()
        self.batches = InFlight(settings.batch)
        self._retry = keys.retry(group, partition)

    def keeping(
        self, keep_claimed: Callable[[Sequence[Message]], Coroutine[Any, Any, None]]
    ) -> Callable[[Sequence[Message]], Coroutine[Any, Any, None]]:
        """``keep_claimed`` (``Claims.keep``), the leases of the batch's slots kept too."""

        async def keep(messages: Sequence[Message]) -> None:
            await asyncio.gather(keep_claimed(messages), self.keep(messages))

        return keep

    async def admit(
        self, deliveries: list[Delivery], failed: dict[EntryKey, BaseException]
    ) -> tuple[list[Delivery], set[EntryKey]]:
        """The deliveries that may be handled now, and the entries parked (acked)."""
        asked: list[tuple[Delivery, str]] = []
        free: list[Delivery] = []
        for delivery in deliveries:
            try:
                key = self.key_of(delivery.event)
            except Exception as exc:  # the key function's fault: the entry fails
                failed[delivery.message.key] = exc
                continue
            if key is None or not delivery.message.event_id:
                free.append(delivery)
            else:
                asked.append((delivery, str(key)))
        if not asked:
            return free, set()
        granted = await self.limiter.acquire(
            [(d.message.event_id, key, self._fresh(d.message)) for d, key in asked],
            lambda i: self._entry(asked[i][0].message),
        )
        parked: list[Message] = []
        for (delivery, key), ok in zip(asked, granted, strict=True):
            if ok:
                free.append(delivery)
                self._holding[delivery.message.key] = (delivery.message.event_id, key)
            else:
                parked.append(delivery.message)
        if parked:
            await self._ack(parked)
        # The read's order among those handled now.
        order = {d.message.key: n for n, d in enumerate(deliveries)}
        free.sort(key=lambda d: order[d.message.key])
        return free, {m.key for m in parked}

    def _fresh(self, message: Message) -> bool:
        """Whether the entry is read for the first time from its aggregate stream: not
        one released (those come on the retry stream), reclaimed or read again."""
        return message.deliveries == 1 and message.stream != self._retry

    def _entry(self, message: Message) -> str:
        """The entry as parked: its carried fields, the deliveries before this read (the
        read that parks it is no attempt) and its partition."""
        fields = {name: message.fields[name] for name in CARRIED if name in message.fields}
        fields.setdefault("origin", message.stream)
        fields["deliveries"] = str(message.deliveries - 1)
        flat = [x for pair in fields.items() for x in pair]
        return json.dumps({"id": message.event_id, "p": self.partition, "f": flat})

    async def _ack(self, parked: Sequence[Message]) -> None:
        by_stream: dict[str, list[str]] = {}
        for message in parked:
            by_stream.setdefault(message.stream, []).append(message.entry_id)
        pipe = self.redis.pipeline(transaction=False)
        for stream, ids in by_stream.items():
            pipe.xack(stream, self.group, *ids)
        await pipe.execute()
        FLOW_DEFERRED.labels(self.group).inc(len(parked))
        log.debug("flow: entries wait for their key's turn", group=self.group, entries=len(parked))

    async def keep(self, messages: Sequence[Message]) -> None:
        """Renew the leases of the entries in handling while a long batch runs (as their
        claims are kept: ``Claims.keep``)."""
        held = [self._holding[m.key] for m in messages if m.key in self._holding]
        while True:
            await asyncio.sleep(self.settings.claim_idle_ms / 3000)
            with contextlib.suppress(*REDIS_DOWN):
                await self.limiter.keep(held)

    async def settled(self, messages: Sequence[Message]) -> int:
        """Free the slots of a settled batch, take turns, and put back what they released."""
        held = [pair for m in messages if (pair := self._holding.pop(m.key, None)) is not None]
        if not held:
            return 0
        return await self._put_back(await self.limiter.release(held))

    async def turn(self) -> Pumped:
        """Take turns (entries whose key has room now), put them back; now and then the
        sweep of released entries nobody put back."""
        pumped = await self.limiter.pump()
        await self._put_back(pumped)
        if time.monotonic() - self._swept > STALE_MS / 6000:
            self._swept = time.monotonic()
            stale = await self.limiter.stale(STALE_MS)
            if stale:
                log.warning("flow: putting back released entries", group=self.group, n=len(stale))
                await self._put_back(Pumped(stale, None, 0))
        return pumped

    async def drain(self) -> int:
        """Take turns until none releases anything (the test harness's drain), waiting for
        a token when entries wait for one; how many were put back."""
        pumped = await self.turn()
        while not pumped.released and pumped.waiting_keys and pumped.due_ms is not None:
            await asyncio.sleep(max(pumped.due_ms, 1) / 1000)
            pumped = await self.turn()
        return len(pumped.released)

    async def run(self, stop: asyncio.Event) -> None:
        """Take turns every ``TICK_S`` at most (sooner when a token is due) until ``stop``:
        tokens refill and leases of dead workers run out with no slot released."""
        while not stop.is_set():
            delay = TICK_S
            try:
                pumped = await self.turn()
                if pumped.due_ms is not None:
                    delay = min(TICK_S, max(pumped.due_ms / 1000, 0.005))
            except REDIS_DOWN:
                pass
            except Exception:
                log.exception("flow: turns failed", group=self.group)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def _put_back(self, pumped: Pumped) -> int:
        """XADD each released entry to the retry stream of its partition."""
        if not pumped.released:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        ids = []
        for raw in pumped.released:
            entry: dict[str, Any] = json.loads(raw)
            flat = entry["f"]
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            pipe.xadd(self.keys.retry(self.group, int(entry["p"])), fields)
            ids.append(entry["id"])
        await pipe.execute()
        await self.limiter.put_back(ids)
        return len(ids)


class InFlight:
    """A flow group's batches in handling while its consumer reads on: a read of parked
    entries must not wait for the handlers of the few it let through, or one key's
    backlog would hold up another key's first entry behind it in the stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # entries in handling at most before the next read
        self._tasks: dict[asyncio.Task[None], int] = {}

    def start(self, handling: Any, entries: int) -> None:
        """Run ``handling`` (a coroutine) as a task, counted as ``entries``."""
        self._tasks[asyncio.create_task(handling)] = entries

    async def room(self) -> None:
        """Wait until fewer than ``limit`` entries are in handling; a batch that failed
        raises its exception here, as it would have in the consumer's own loop."""
        self._reap()
        while self._tasks and sum(self._tasks.values()) >= self.limit:
            await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            self._reap()

    async def idle(self) -> None:
        """Wait for every batch in handling to be settled (before pending entries are
        read again, or as the consumer stops); then raise the first one's failure."""
        if self._tasks:
            await asyncio.wait(self._tasks)
            self._reap()

    def _reap(self) -> None:
        done = [task for task in self._tasks if task.done()]
        for task in done:
            del self._tasks[task]
        failed = [task.exception() for task in done if not task.cancelled()]
        for error in failed:
            if error is not None:
                raise error
