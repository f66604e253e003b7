"""The consumer-group runtime. It knows streams and outcomes, nothing of domains.

One ``Consumer`` runs one handler group in one stream partition (a worker runs one
per partition, all under the same stable consumer name):
it creates the groups (``MKSTREAM``, ``BUSYGROUP`` ignored, ``NOGROUP``
recovered), drains its own pending entries first, then reads new ones in
batches with ``BLOCK`` on a connection of its own. Entries are acked only
after the handler returned, so after its effect committed. Entries of dead
consumers are reclaimed with ``XAUTOCLAIM``; a long batch keeps its entries
by resetting their idle time. Failures go to retries with backoff and, after
``max_deliveries``, to the group's dead letters.

A crash leaves no outcome, only Redis's delivery counter, and re-reading an
entry (``XREADGROUP`` of the pending history, ``XAUTOCLAIM``) charges it a
delivery. So entries recovered after a crash, from our own pending list or
from another consumer, are read and handled one at a time: a worker killed by
one entry charges that entry alone, which reaches the dead letters after
``max_deliveries`` while the rest of its batch is handled on the first restart.

A failure that says the database is down, or a ``ServiceUnavailable`` (Redis
not answering the mail budget or rate limit), is not the entry's fault: the
consumer keeps such entries in hand (still claimed) and runs them again with
backoff until the service answers, so an outage neither spends their
deliveries nor sends them to the dead letters. Stopping meanwhile leaves them
pending for the next start.

This module holds ``Consumer`` itself: its groups, its loops, its reads and what
it does with a batch read. The consumer holds a helper for each part of a batch's
handling (a call per batch, not per entry):

- ``sluice.consumers.handling``: running the handler over a batch, its deadline, and
  holding entries through an outage (``HeldBack``, ``HandlerTimeout``);
- ``sluice.consumers.outcomes``: settling the outcomes: recording the attempts, acking
  the entries done, retrying or dead-lettering the rest;
- ``sluice.consumers.claims``: keeping a long batch's entries claimed, and claiming the
  entries of dead consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import wait_or_stop
from sluice.consumers.claims import Claims
from sluice.consumers.handling import Handling, HeldBack, every, log_batch, log_events
from sluice.consumers.outcomes import Settler
from sluice.consumers.recovery import RecoveryGate
from sluice.flow.control import FlowControl
from sluice.records.attempts import Batch
from sluice.records.deliveries import BATCH, DeliveryLog
from sluice.records.pause import READ_BLOCK_MS, PauseWatch
from sluice.streams.engine_keys import Keys
from sluice.streams.failures import Failures
from sluice.streams.group_setup import ensure_group
from sluice.streams.messages import (
    Delivery,
    EntryKey,
    Message,
    NoOutcome,
    PoisonMessage,
    RawEntry,
    fields_from_redis,
)
from sluice.streams.spec import Counters, GroupSpec, RuntimeSettings
from sluice.telemetry import attempts, run_spans, tracing

log = structlog.get_logger(__name__)
_UNTRACED = contextlib.nullcontext()


class Consumer:
    def __init__(
        self,
        spec: GroupSpec,
        redis: aioredis.Redis,
        keys: Keys,
        name: str,
        settings: RuntimeSettings,
        partition: int = 0,
        gate: RecoveryGate | None = None,
        deliveries: DeliveryLog | None = None,
        pauses: PauseWatch | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """``gate``: shared by every consumer of the process (see ``sluice.consumers.recovery``);
        ``deliveries``: the process's record of attempts (none: not recorded);
        ``pauses``: the process's watch of paused groups (none: never paused);
        ``stop``: what ends the holding of entries through an outage when ``step`` is
        called without ``run`` (the test harness; ``run`` brings its own)."""
        self.deliveries = deliveries
        self.spec = spec
        self.partition = partition
        self.group = spec.name
        self.redis = redis
        self.keys = keys
        self.name = name
        self.settings = spec.settings(settings)
        self.pauses = pauses
        if pauses is not None and self.settings.block_ms is not None:
            # A pause stops the reads within 2 s (sluice.records.pause).
            block_ms = min(self.settings.block_ms, READ_BLOCK_MS)
            self.settings = replace(self.settings, block_ms=block_ms)
        # One partition's streams, all in one slot: one XREADGROUP reads them together.
        self.streams = [keys.stream(a, partition) for a in spec.aggregates]
        self.streams.append(keys.retry(spec.name, partition))
        self.failures = Failures(redis, keys, spec.name, partition)
        self.gate = gate or RecoveryGate()
        self.counters = Counters()
        self.claims = Claims(redis, self.group, name, self.settings, self.streams)
        self.flow = (
            None
            if spec.flow is None
            else FlowControl(spec.flow, redis, keys, spec.name, partition, self.settings)
        )
        keep = self.claims.keep if self.flow is None else self.flow.keeping(self.claims.keep)
        self.handling = Handling(spec, self.settings, keep)
        self.settler = Settler(
            spec,
            redis,
            keys,
            name,
            partition,
            self.settings,
            deliveries,
            self.failures,
            self.counters,
        )
        self._drained = False
        self._pending_after = dict.fromkeys(self.streams, "0")
        self._stop = stop or asyncio.Event()

    # Groups.

    async def ensure_groups(self) -> None:
        for stream in self.streams:
            await ensure_group(self.redis, stream, self.group)
        # A start counts as an ack for the stall check: a consumer stalls when it holds
        # entries and acked none for SLUICE_STALL_SECONDS since it last acked or started.
        await self.redis.hset(
            self.keys.acks(self.group, self.partition), self.name, int(time.time() * 1000)
        )

    # The loops.

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; the batch in hand is finished, then acked."""
        self._stop = stop
        background = [
            asyncio.create_task(every(stop, self.claims.interval(), self.reclaim, self.group)),
            asyncio.create_task(
                every(stop, self._move_interval(), self.failures.move_due, self.group)
            ),
        ]
        if self.flow is not None and self.partition == 0:  # one per worker takes turns
            background.append(asyncio.create_task(self.flow.run(stop)))
        try:
            await self._consume(stop)
        finally:
            if self.flow is not None:
                with contextlib.suppress(HeldBack):  # left pending, as the batch in hand
                    await self.flow.batches.idle()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    async def _consume(self, stop: asyncio.Event) -> None:
        backoff = 0.1
        groups_ready = False
        while not stop.is_set():
            try:
                if not groups_ready:
                    await self.ensure_groups()
                    groups_ready = True
                await self.step()
                backoff = 0.1
            except HeldBack:
                return
            except REDIS_DOWN as exc:  # before ResponseError: a cluster's CLUSTERDOWN is one
                log.warning("consumer: redis unavailable", group=self.group, error=str(exc))
                self._drain_again()  # entries in hand may be ours to finish after reconnect
                await wait_or_stop(stop, backoff)
                backoff = min(backoff * 2, 5.0)
            except redis.exceptions.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("consumer: group missing, recreating", group=self.group)
                groups_ready = False

    async def step(self) -> int:
        """Handle one batch: our own pending entries first, each alone, then new ones;
        while the group is paused, nothing (until it is resumed or we stop)."""
        if self.pauses is not None and self._paused():
            await self.pauses.until_resumed(self.group, self._stop)
            return 0
        if self._drained:
            if self.flow is not None:
                await self.flow.batches.room()
            async with self.gate.batch():
                batch = await self._read_new()
                if batch:
                    await self.process(batch, read_on=self.settings.block_ms is not None)
            return len(batch)
        if self.flow is not None:
            await self.flow.batches.idle()  # no entry in hand is read again as pending
        if not await self._pending_left():
            self._drained = True
            return 0
        async with self.gate.recovery():
            pending = await self._read_pending()
            if pending:
                await self.process(pending)
        if pending is None:
            self._drained = True
            return 0
        return len(pending)

    async def _pending_left(self) -> bool:
        """Whether our pending list holds entries past the ones drained (read without
        claiming: only then is the process's gate taken)."""
        for stream in self.streams:
            after = self._pending_after[stream]
            rows: list[Any] = await self.redis.xpending_range(
                stream,
                self.group,
                min="-" if after == "0" else f"({after}",
                max="+",
                count=1,
                consumername=self.name,
            )
            if rows:
                return True
        return False

    def _drain_again(self) -> None:
        self._drained = False
        self._pending_after = dict.fromkeys(self.streams, "0")

    def _paused(self) -> bool:
        return self.pauses is not None and self.pauses.paused(self.group)

    async def _read_new(self) -> list[Message]:
        if self._paused():  # paused while we waited for the gate
            return []
        reply: Any = await self.redis.xreadgroup(
            self.group,
            self.name,
            dict.fromkeys(self.streams, ">"),
            count=self.settings.batch,
            block=self.settings.block_ms,
        )
        messages: list[Message] = []
        for stream_raw, entries in reply or []:
            stream = stream_raw.decode()
            live = await self.claims.live_entries(stream, entries)
            messages += [self._message(stream, eid, fields, 1) for eid, fields in live]
        return messages

    async def _read_pending(self) -> list[Message] | None:
        """The next entry of our own pending list, alone; None once the list is drained.

        A previous process under our name died (or lost Redis) holding these entries,
        perhaps killed by one of them. Reading pending history charges every entry it
        returns a delivery, and ``COUNT`` is per stream: so one stream, one entry at a
        time. Past entries are skipped by id, so an entry left pending cannot stall us.
        """
        for stream in self.streams:
            reply: Any = await self.redis.xreadgroup(
                self.group, self.name, {stream: self._pending_after[stream]}, count=1
            )
            entries = [entry for _, stream_entries in reply or [] for entry in stream_entries]
            if entries:
                self._pending_after[stream] = entries[-1][0].decode()
                return await self._redelivered(stream, entries)
        return None

    async def _redelivered(self, stream: str, entries: Sequence[RawEntry]) -> list[Message]:
        """Entries delivered before, counted with Redis's delivery counter."""
        live = await self.claims.live_entries(stream, entries)
        counts = await self.claims.delivery_counts(stream, live)
        return [self._message(stream, eid, fields, counts.get(eid, 1)) for eid, fields in live]

    def _message(
        self, stream: str, entry_id: str, raw: Mapping[bytes, bytes], times_delivered: int
    ) -> Message:
        fields = fields_from_redis(raw)
        before = int(fields.get("deliveries", "0") or 0)
        return Message(stream, entry_id, fields, before + times_delivered)

    # A batch read.

    async def process(self, messages: Sequence[Message], read_on: bool = False) -> None:
        """Handle a batch and settle its outcomes: a poison entry, or one delivered past
        ``max_deliveries`` without an outcome, fails without reaching the handler. A flow
        group's entries wait for their key's turn; ``read_on``: the next read does not
        wait for these handlers (``sluice.flow.control``)."""
        deliveries: list[Delivery] = []
        failed: dict[EntryKey, BaseException] = {}
        started = time.time()
        for message in messages:
            if message.deliveries > self.settings.max_deliveries:
                failed[message.key] = NoOutcome(
                    f"delivered {message.deliveries} times without an outcome"
                )
                continue
            try:
                deliveries.append(Delivery(message, message.decode()))
            except PoisonMessage as exc:
                failed[message.key] = exc
        if self.flow is not None:
            deliveries, parked = await self.flow.admit(deliveries, failed)
            messages = [m for m in messages if m.key not in parked]
            if not messages:  # every entry waits for its turn: nothing to settle or log
                return None
            if read_on:
                handling = self._handle(messages, deliveries, failed, started)
                return self.flow.batches.start(self.gate.taking(handling), len(deliveries))
        await self._handle(messages, deliveries, failed, started)

    async def _handle(
        self,
        messages: Sequence[Message],
        deliveries: list[Delivery],
        failed: dict[EntryKey, BaseException],
        started: float,
    ) -> None:
        duration_ms = 0.0
        # With tracing on, failed attempts' spans wait for their outcome (retry, dead letter).
        with attempts.holding() if tracing.ENABLED else _UNTRACED:
            if deliveries:
                logged = self.deliveries is not None
                batch = Batch(self.group, self.name, started) if logged else None
                token = BATCH.set(batch)
                try:
                    failed.update(await self.handling.run(deliveries, self._stop))
                finally:
                    BATCH.reset(token)
                duration_ms = (time.time() - started) * 1000
            await self.settler.settle(messages, failed, started, duration_ms)
        if self.flow is not None:
            await self.flow.settled(messages)
        log_batch(self.group, messages, failed, duration_ms)
        log_events(self.group, deliveries, failed, duration_ms)

    # Reclaiming from dead consumers.

    async def reclaim(self) -> int:
        """Claim entries idle past ``claim_idle_ms`` from any consumer, and handle them.

        Their consumer died or hung holding them, perhaps because of one of them, so
        each is claimed (charged a delivery) and handled alone. Nothing is claimed
        before our own pending list is drained: its entries are handled alone too, and
        not claimed a second time while they wait their turn.
        """
        if not self._drained or self._paused():  # a paused group's entries wait
            return 0
        total = 0
        for stream in self.streams:
            if await self.claims.any_idle(stream):  # else the process's gate is not taken
                async with self.gate.recovery():
                    total += await self._reclaim_alone(stream)
        return total

    async def _reclaim_alone(self, stream: str) -> int:
        """Up to ``batch`` entries, one per ``XAUTOCLAIM``, each handled alone."""
        claimed = 0
        for _ in range(self.settings.batch):
            entries, scanned_all = await self.claims.claim_one(stream)
            batch = await self._redelivered(stream, entries) if entries else []
            for message in batch:  # logged first: if it kills us, the log names it
                log.info(
                    "consumer: reclaimed entry",
                    group=self.group,
                    stream=stream,
                    entry_id=message.entry_id,
                    deliveries=message.deliveries,
                )
            if batch:
                self.counters.claimed += len(batch)
                claimed += len(batch)
                with run_spans.reclaimed(self.claims.owners):  # its span says so (tracing on)
                    await self.process(batch)
            if scanned_all:
                break
        return claimed

    # Background jobs.

    def _move_interval(self) -> float:
        return min(max(self.settings.retry_base_ms / 4000, 0.05), 1.0)
