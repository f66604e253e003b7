"""Settling a batch's outcomes, a helper the consumer (``sluice.consumers.consumer``) holds.

Each attempt is recorded (when the process keeps a delivery log); entries handled,
or settled otherwise (``SETTLED``: a duplicate, a cancelled one, one recorded by the
handler), are acked together with the stall check's mark; a failed entry goes to a
retry with backoff or, when it is permanent or past ``max_deliveries``, to the
group's dead letters and the group's ``on_dead_letter`` hook. An entry that can only
wait (``NotYet``: a receiver's slots are taken) comes back after the wait it names,
with the deliveries it had before: waiting is no attempt, so it is neither recorded
nor charged, and never dead-lettered for it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import redis.asyncio as aioredis
import structlog

from sluice.records.attempts import Attempt, outcome_of
from sluice.records.deliveries import DeliveryLog
from sluice.streams.engine_keys import Keys
from sluice.streams.failures import Failures, backoff_ms
from sluice.streams.messages import (
    SETTLED,
    Message,
    NoOutcome,
    NotYet,
    Outcomes,
    PoisonMessage,
    Recorded,
)
from sluice.streams.spec import Counters, GroupSpec, RuntimeSettings
from sluice.telemetry import run_spans, tracing
from sluice.telemetry.prometheus import DEAD_LETTERED, FLOW_DEFERRED, HANDLED, RETRIES

log = structlog.get_logger(__name__)


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class Settler:
    """Record, ack, retry or dead-letter a handled batch (``settle``)."""

    def __init__(
        self,
        spec: GroupSpec,
        redis: aioredis.Redis,
        keys: Keys,
        name: str,
        partition: int,
        settings: RuntimeSettings,
        deliveries: DeliveryLog | None,
        failures: Failures,
        counters: Counters,
    ) -> None:
        self.spec = spec
        self.redis = redis
        self.keys = keys
        self.group = spec.name
        self.name = name
        self.partition = partition
        self.settings = settings
        self.deliveries = deliveries
        self.failures = failures
        self.counters = counters

    async def settle(
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
            elif isinstance(error, NotYet):
                await self._later(message, error)
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
            if isinstance(error, Recorded | NotYet):
                continue  # the handler wrote it with its effect; or it only waits
            outcome = outcome_of(error, self._given_up(m, error))
            text = None if error is None or outcome in ("duplicate", "cancelled") else _text(error)
            ms = 0.0 if isinstance(error, (NoOutcome, PoisonMessage)) else duration_ms
            attempts.append(
                Attempt(
                    m.event_id,
                    self.group,
                    self.name,
                    m.stream,
                    m.entry_id,
                    m.deliveries,
                    outcome,
                    text,
                    at,
                    round(ms, 3),
                )
            )
        return attempts

    def _given_up(self, message: Message, error: BaseException | None) -> bool:
        """Whether ``error`` sends the entry to the dead letters rather than to a retry."""
        if error is None:
            return False
        permanent = bool(getattr(error, "permanent", False))
        return permanent or message.deliveries >= self.settings.max_deliveries

    def _about(self, message: Message) -> dict[str, object]:
        """What a failure's log line says of its entry."""
        return {
            "group": self.group,
            "event_id": message.event_id,
            "event_type": message.type,
            "trace_id": message.trace_id,
            "deliveries": message.deliveries,
        }

    async def _fail(self, message: Message, error: BaseException) -> None:
        text = _text(error)
        if self._given_up(message, error):
            await self.failures.dead(
                message.stream, message.entry_id, message.fields, message.deliveries, text
            )
            self.counters.dead += 1
            if tracing.ENABLED:
                run_spans.dead_lettered(message, self.group, text, self.failures.dead_key)
            DEAD_LETTERED.labels(self.group).inc()
            log.error("event dead-lettered", **self._about(message), error=text)
            if self.spec.on_dead_letter is not None:
                try:
                    await self.spec.on_dead_letter(message, error)
                except Exception:  # the dead letter stands; only the group's record of it failed
                    log.exception(
                        "dead-letter hook failed", group=self.group, event_id=message.event_id
                    )
            return
        delay = backoff_ms(self.settings.retry_base_ms, message.deliveries)
        await self.failures.retry(
            message.stream, message.entry_id, message.fields, message.deliveries, delay
        )
        self.counters.retried += 1
        if tracing.ENABLED:
            run_spans.retrying(message, delay)
        RETRIES.labels(self.group).inc()
        log.warning("event failed, retrying", **self._about(message), retry_in_ms=delay, error=text)

    async def _later(self, message: Message, error: NotYet) -> None:
        """Back on the retry stream after ``error.retry_in_s`` (a quarter more at most,
        so that waiters part), with the deliveries it had before this one."""
        delay = int(error.retry_in_s * 1000 * (1 + random.random() / 4))
        await self.failures.retry(
            message.stream, message.entry_id, message.fields, message.deliveries - 1, delay
        )
        FLOW_DEFERRED.labels(self.group).inc()
        log.debug("event waits", **self._about(message), retry_in_ms=delay, reason=str(error))
