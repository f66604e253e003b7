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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
import structlog

from sluice.errors import ServiceUnavailable
from sluice.metrics import DEAD_LETTERED, HANDLED, HANDLER_SECONDS, HANDLER_TIMEOUTS, RETRIES
from sluice.store.errors import database_unavailable
from sluice.streams.attempts import Attempt, Batch, Outcome
from sluice.streams.deliveries import BATCH, DeliveryLog
from sluice.streams.failures import Failures, backoff_ms
from sluice.streams.group_setup import ensure_group
from sluice.streams.keys import Keys
from sluice.streams.messages import (
    SETTLED,
    Cancelled,
    Delivery,
    Duplicate,
    Message,
    NoOutcome,
    PoisonMessage,
    Recorded,
    fields_from_redis,
)
from sluice.streams.outage import REDIS_DOWN
from sluice.streams.pause import READ_BLOCK_MS, PauseWatch
from sluice.streams.recovery import RecoveryGate
from sluice.streams.spec import Counters, GroupSpec, RuntimeSettings
from sluice.streams.waiting import cancel_and_wait, wait_or_stop

log = structlog.get_logger(__name__)

RawEntry = tuple[bytes, dict[bytes, bytes] | None]
Outcomes = Mapping[tuple[str, str], BaseException]


class HeldBack(Exception):
    """Stopping while a service is down: the batch in hand stays pending."""


class HandlerTimeout(RuntimeError):
    """The handler ran past the group's deadline (``SLUICE_HANDLER_TIMEOUT_SECONDS``)."""


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _outcome(error: BaseException | None, given_up: bool) -> Outcome:
    if error is None:
        return "handled"
    if isinstance(error, Duplicate):
        return "duplicate"
    if isinstance(error, Cancelled):
        return "cancelled"
    return "dead_lettered" if given_up else "failed"


def _outage(error: BaseException) -> bool:
    """Whether ``error`` is an outage, not the entry's fault: held, not retried. A settled
    outcome (a projection names every entry ``Recorded``) is none, and is told apart
    before the walk along the exception's chain."""
    if isinstance(error, SETTLED):
        return False
    return isinstance(error, ServiceUnavailable) or database_unavailable(error)


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
    ) -> None:
        """``gate``: shared by every consumer of the process (see ``sluice.streams.recovery``);
        ``deliveries``: the process's record of attempts (none: not recorded);
        ``pauses``: the process's watch of paused groups (none: never paused)."""
        self.deliveries = deliveries
        self.spec = spec
        self.partition = partition
        self.group = spec.name
        self.redis = redis
        self.keys = keys
        self.name = name
        self.settings = spec.settings(settings)
        self.pauses = pauses
        if pauses is not None:  # a pause stops the reads within 2 s (sluice.streams.pause)
            block_ms = min(self.settings.block_ms, READ_BLOCK_MS)
            self.settings = replace(self.settings, block_ms=block_ms)
        # One partition's streams, all in one slot: one XREADGROUP reads them together.
        self.streams = [keys.stream(a, partition) for a in spec.aggregates]
        self.streams.append(keys.retry(spec.name, partition))
        self.failures = Failures(redis, keys, spec.name, partition)
        self.gate = gate or RecoveryGate()
        self.counters = Counters()
        self._cursors = dict.fromkeys(self.streams, "0-0")
        self._drained = False
        self._pending_after = dict.fromkeys(self.streams, "0")
        self._stop = asyncio.Event()

    # Groups.

    async def ensure_groups(self) -> None:
        for stream in self.streams:
            await ensure_group(self.redis, stream, self.group)
        # A start counts as an ack for the stall check: a consumer stalls when it holds
        # entries and acked none for SLUICE_STALL_SECONDS since it last acked or started.
        await self.redis.hset(self.keys.acks(self.group, self.partition), self.name,
                              int(time.time() * 1000))  # fmt: skip

    # The loops.

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; the batch in hand is finished, then acked."""
        self._stop = stop
        background = [
            asyncio.create_task(self._every(stop, self._claim_interval(), self.reclaim)),
            asyncio.create_task(self._every(stop, self._move_interval(), self.failures.move_due)),
        ]
        try:
            await self._consume(stop)
        finally:
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
            async with self.gate.batch():
                batch = await self._read_new()
                if batch:
                    await self.process(batch)
            return len(batch)
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
                stream, self.group, min="-" if after == "0" else f"({after}", max="+",
                count=1, consumername=self.name,
            )  # fmt: skip
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
            live = await self._live_entries(stream, entries)
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
        live = await self._live_entries(stream, entries)
        counts = await self._delivery_counts(stream, live)
        return [self._message(stream, eid, fields, counts.get(eid, 1)) for eid, fields in live]

    async def _live_entries(
        self, stream: str, entries: Sequence[RawEntry]
    ) -> list[tuple[str, dict[bytes, bytes]]]:
        """Entries whose data still exists; pending ids of trimmed entries are acked."""
        gone = [eid.decode() for eid, fields in entries if not fields]
        if gone:
            await self.redis.xack(stream, self.group, *gone)
            log.warning("consumer: pending entries were deleted", stream=stream, ids=gone)
        return [(eid.decode(), fields) for eid, fields in entries if fields]

    async def _delivery_counts(
        self, stream: str, entries: Sequence[tuple[str, object]]
    ) -> dict[str, int]:
        if not entries:
            return {}
        rows: list[dict[str, Any]] = await self.redis.xpending_range(
            stream, self.group, min=entries[0][0], max=entries[-1][0], count=len(entries) * 4
        )
        return {row["message_id"].decode(): int(row["times_delivered"]) for row in rows}

    def _message(
        self, stream: str, entry_id: str, raw: Mapping[bytes, bytes], times_delivered: int
    ) -> Message:
        fields = fields_from_redis(raw)
        before = int(fields.get("deliveries", "0") or 0)
        return Message(stream, entry_id, fields, before + times_delivered)

    # Handling and outcomes.

    async def process(self, messages: Sequence[Message]) -> None:
        deliveries: list[Delivery] = []
        failed: dict[tuple[str, str], BaseException] = {}
        started, duration_ms = time.time(), 0.0
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
        if deliveries:
            batch = Batch(self.group, self.name, started) if self.deliveries is not None else None
            token = BATCH.set(batch)
            try:
                failed.update(await self._handle(deliveries))
            finally:
                BATCH.reset(token)
            duration_ms = (time.time() - started) * 1000
        await self._settle(messages, failed, started, duration_ms)

    async def _handle(self, deliveries: Sequence[Delivery]) -> Outcomes:
        keeper = asyncio.create_task(self._keep_claimed([d.message for d in deliveries]))
        started = time.perf_counter()
        try:
            return await self._handle_through_outages(deliveries)
        finally:
            await cancel_and_wait(keeper)
            seconds = time.perf_counter() - started
            HANDLER_SECONDS.labels(self.group).observe(seconds)
            self._log_batch(deliveries, seconds)

    async def _handle_through_outages(self, deliveries: Sequence[Delivery]) -> Outcomes:
        """The handler's outcomes; entries that failed because the database or another
        service is down are run again, with backoff, until it answers (see the module
        docstring)."""
        outcomes: dict[tuple[str, str], BaseException] = {}
        # From a twentieth of SLUICE_RETRY_BASE_MS up to 2.5 times it (0.1 s to 5 s).
        base = self.settings.retry_base_ms / 1000
        backoff, ceiling = base / 20, base * 2.5
        while True:
            failed = await self._handle_once(deliveries)
            held = {key for key, error in failed.items() if _outage(error)}
            outcomes.update((key, e) for key, e in failed.items() if key not in held)
            if not held:
                return outcomes
            log.warning(
                "consumer: a service is down, holding entries", group=self.group,
                entries=len(held), retry_in=backoff, error=str(failed[next(iter(held))]),
            )  # fmt: skip
            await wait_or_stop(self._stop, backoff)
            if self._stop.is_set():
                raise HeldBack(f"{len(held)} entries left pending: a service is down")
            backoff = min(backoff * 2, ceiling)
            deliveries = [d for d in deliveries if d.message.key in held]

    async def _handle_once(self, deliveries: Sequence[Delivery]) -> Outcomes:
        deadline = asyncio.timeout(self.settings.handler_timeout_s)
        try:
            async with deadline:
                return await self.spec.handler(deliveries)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                return self._past_deadline(deliveries)
            if _outage(exc):
                return {d.message.key: exc for d in deliveries}
            if isinstance(exc, REDIS_DOWN):
                raise  # not the entries' fault: they stay pending and come back
            log.exception("consumer: handler failed for the whole batch", group=self.group)
            return {d.message.key: exc for d in deliveries}

    def _past_deadline(self, deliveries: Sequence[Delivery]) -> Outcomes:
        """The batch ran past the group's deadline and was cancelled: every entry failed."""
        seconds = self.settings.handler_timeout_s
        HANDLER_TIMEOUTS.labels(self.group).inc()
        log.error("consumer: handler cancelled at its deadline", group=self.group,
                  entries=len(deliveries), timeout_s=seconds)  # fmt: skip
        error = HandlerTimeout(f"no outcome within {seconds:g} s, cancelled")
        return {d.message.key: error for d in deliveries}

    def _log_batch(self, deliveries: Sequence[Delivery], seconds: float) -> None:
        if not log.is_enabled_for(logging.INFO):  # a line's arguments cost even when dropped
            return
        for delivery in deliveries:
            m = delivery.message
            log.info(
                "event handled",
                group=self.group,
                stream=m.stream,
                entry_id=m.entry_id,
                event_id=m.event_id,
                event_type=m.type,
                trace_id=m.trace_id,
                deliveries=m.deliveries,
                batch_ms=round(seconds * 1000, 2),
            )

    async def _settle(
        self, messages: Sequence[Message], failed: Outcomes, started: float, duration_ms: float
    ) -> None:
        """Record the attempts, then ack the entries done and retry or dead-letter the rest."""
        if self.deliveries is not None:
            await self.deliveries.record(self._attempts(messages, failed, started, duration_ms))
        done: dict[str, list[str]] = {}
        for message in messages:
            error = failed.get(message.key)
            if error is None or isinstance(error, SETTLED):
                done.setdefault(message.stream, []).append(message.entry_id)
            else:
                await self._fail(message, error)
        pipe = self.redis.pipeline(transaction=False)
        for stream, ids in done.items():
            pipe.xack(stream, self.group, *ids)
        if done:  # the stall check's mark: this consumer acked just now
            acks = self.keys.acks(self.group, self.partition)
            pipe.hset(acks, self.name, int(time.time() * 1000))
        if len(pipe):
            await pipe.execute()
        handled = sum(len(ids) for ids in done.values())
        self.counters.handled += handled
        HANDLED.labels(self.group).inc(handled)

    def _attempts(
        self, messages: Sequence[Message], failed: Outcomes, started: float, duration_ms: float
    ) -> list[Attempt]:
        at = datetime.fromtimestamp(started, UTC).isoformat()
        attempts: list[Attempt] = []
        for m in messages:
            error = failed.get(m.key)
            if isinstance(error, Recorded):
                continue  # the handler wrote it with its effect
            outcome = _outcome(error, self._given_up(m, error))
            text = None if error is None or outcome in ("duplicate", "cancelled") else _text(error)
            ms = 0.0 if isinstance(error, (NoOutcome, PoisonMessage)) else duration_ms
            attempts.append(Attempt(m.event_id, self.group, self.name, m.stream, m.entry_id,
                                    m.deliveries, outcome, text, at, round(ms, 3)))  # fmt: skip
        return attempts

    def _given_up(self, message: Message, error: BaseException | None) -> bool:
        """Whether ``error`` sends the entry to the dead letters rather than to a retry."""
        if error is None:
            return False
        permanent = bool(getattr(error, "permanent", False))
        return permanent or message.deliveries >= self.settings.max_deliveries

    async def _fail(self, message: Message, error: BaseException) -> None:
        text = _text(error)
        if self._given_up(message, error):
            await self.failures.dead(
                message.stream, message.entry_id, message.fields, message.deliveries, text
            )
            self.counters.dead += 1
            DEAD_LETTERED.labels(self.group).inc()
            log.error(
                "event dead-lettered", group=self.group, event_id=message.event_id,
                event_type=message.type, trace_id=message.trace_id,
                deliveries=message.deliveries, error=text,
            )  # fmt: skip
            if self.spec.on_dead_letter is not None:
                try:
                    await self.spec.on_dead_letter(message, error)
                except Exception:  # the dead letter stands; only the group's record of it failed
                    log.exception("dead-letter hook failed", group=self.group,
                                  event_id=message.event_id)  # fmt: skip
            return
        delay = backoff_ms(self.settings.retry_base_ms, message.deliveries)
        await self.failures.retry(
            message.stream, message.entry_id, message.fields, message.deliveries, delay
        )
        self.counters.retried += 1
        RETRIES.labels(self.group).inc()
        log.warning(
            "event failed, retrying", group=self.group, event_id=message.event_id,
            event_type=message.type, trace_id=message.trace_id,
            deliveries=message.deliveries, retry_in_ms=delay, error=text,
        )  # fmt: skip

    async def _keep_claimed(self, messages: Sequence[Message]) -> None:
        """Reset the entries' idle time while a long batch runs, so no one reclaims them."""
        by_stream: dict[str, list[str]] = {}
        for message in messages:
            by_stream.setdefault(message.stream, []).append(message.entry_id)
        while True:
            await asyncio.sleep(self.settings.claim_idle_ms / 3000)
            with contextlib.suppress(*REDIS_DOWN):
                for stream, ids in by_stream.items():
                    await self.redis.xclaim(
                        stream, self.group, self.name, 0, list[Any](ids), justid=True
                    )

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
            total += await self._reclaim_stream(stream)
        return total

    async def _reclaim_stream(self, stream: str) -> int:
        """Up to ``batch`` entries, one per ``XAUTOCLAIM``, which scans at most ten;
        the cursor carries the scan over to the next round."""
        idle: list[Any] = await self.redis.xpending_range(
            stream, self.group, min="-", max="+", count=1, idle=self.settings.claim_idle_ms
        )
        if not idle:
            return 0  # nothing to claim: the process's gate is not taken
        async with self.gate.recovery():
            return await self._reclaim_alone(stream)

    async def _reclaim_alone(self, stream: str) -> int:
        claimed = 0
        for _ in range(self.settings.batch):
            batch, scanned_all = await self._claim_one(stream)
            for message in batch:  # logged first: if it kills us, the log names it
                log.info("consumer: reclaimed entry", group=self.group, stream=stream,
                         entry_id=message.entry_id, deliveries=message.deliveries)  # fmt: skip
            if batch:
                self.counters.claimed += len(batch)
                claimed += len(batch)
                await self.process(batch)
            if scanned_all:
                break
        return claimed

    async def _claim_one(self, stream: str) -> tuple[list[Message], bool]:
        """The entry claimed (if any), and whether the scan got back to the start."""
        reply = await self.redis.xautoclaim(
            stream,
            self.group,
            self.name,
            self.settings.claim_idle_ms,
            start_id=self._cursors[stream],
            count=1,
        )
        cursor, entries = reply[0], reply[1]
        deleted = reply[2] if len(reply) > 2 else []
        self._cursors[stream] = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        if deleted:
            log.warning("consumer: claimed entries were deleted", stream=stream, n=len(deleted))
        batch = await self._redelivered(stream, entries) if entries else []
        return batch, self._cursors[stream] == "0-0"

    def _claim_interval(self) -> float:
        return min(max(self.settings.claim_idle_ms / 2000, 0.2), 30.0)

    def _move_interval(self) -> float:
        return min(max(self.settings.retry_base_ms / 4000, 0.05), 1.0)

    async def _every(
        self, stop: asyncio.Event, seconds: float, job: Callable[[], Awaitable[int]]
    ) -> None:
        while not stop.is_set():
            await wait_or_stop(stop, seconds)
            if stop.is_set():
                return
            try:
                await job()
            except HeldBack:
                return
            except REDIS_DOWN:
                continue
            except redis.exceptions.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    log.exception("consumer: background job failed", group=self.group)
            except Exception:
                log.exception("consumer: background job failed", group=self.group)
