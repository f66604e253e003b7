"""Running a group's handler over a batch, a helper the consumer
(``sluice.consumers.consumer``) holds, and the lines it logs of a batch.

The decoded entries are handled under the group's deadline (past it:
``HandlerTimeout``) while their claims are kept. Entries that failed because the
database or another service is down are held and run again with backoff until it
answers; stopping meanwhile raises ``HeldBack`` and leaves them pending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import redis.exceptions
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.aio.waiting import cancel_and_wait, wait_or_stop
from sluice.errors import ServiceUnavailable
from sluice.records.attempts import outcome_of
from sluice.store.errors import database_unavailable
from sluice.streams.messages import SETTLED, Delivery, EntryKey, Message, NotYet, Outcomes
from sluice.streams.spec import GroupSpec, RuntimeSettings
from sluice.telemetry.prometheus import HANDLER_SECONDS, HANDLER_TIMEOUTS

log = structlog.get_logger(__name__)


class HeldBack(Exception):
    """Stopping while a service is down: the batch in hand stays pending."""


class HandlerTimeout(RuntimeError):
    """The handler ran past the group's deadline (``SLUICE_HANDLER_TIMEOUT_SECONDS``)."""


def _outage(error: BaseException) -> bool:
    """Whether ``error`` is an outage, not the entry's fault: held, not retried. A settled
    outcome (a projection names every entry ``Recorded``) is none, and is told apart
    before the walk along the exception's chain."""
    if isinstance(error, (*SETTLED, NotYet)):
        return False
    return isinstance(error, ServiceUnavailable) or database_unavailable(error)


class Handling:
    """``run``: a batch's outcomes from the group's handler, held through outages."""

    def __init__(
        self,
        spec: GroupSpec,
        settings: RuntimeSettings,
        keep_claimed: Callable[[Sequence[Message]], Coroutine[Any, Any, None]],
    ) -> None:
        self.spec = spec
        self.group = spec.name
        self.settings = settings
        self._keep_claimed = keep_claimed

    async def run(self, deliveries: Sequence[Delivery], stop: asyncio.Event) -> Outcomes:
        """``stop``: what ends the holding of entries through an outage (``HeldBack``)."""
        keeper = asyncio.create_task(self._keep_claimed([d.message for d in deliveries]))
        started = time.perf_counter()
        try:
            return await self._through_outages(deliveries, stop)
        finally:
            await cancel_and_wait(keeper)
            HANDLER_SECONDS.labels(self.group).observe(time.perf_counter() - started)

    async def _through_outages(
        self, deliveries: Sequence[Delivery], stop: asyncio.Event
    ) -> Outcomes:
        """The handler's outcomes; entries that failed because the database or another
        service is down are run again, with backoff, until it answers (see the module
        docstring)."""
        outcomes: dict[EntryKey, BaseException] = {}
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
                "consumer: a service is down, holding entries",
                group=self.group,
                entries=len(held),
                retry_in=backoff,
                error=str(failed[next(iter(held))]),
            )
            await wait_or_stop(stop, backoff)
            if stop.is_set():
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
        log.error(
            "consumer: handler cancelled at its deadline",
            group=self.group,
            entries=len(deliveries),
            timeout_s=seconds,
        )
        error = HandlerTimeout(f"no outcome within {seconds:g} s, cancelled")
        return {d.message.key: error for d in deliveries}


def log_batch(
    group: str, messages: Sequence[Message], failed: Outcomes, duration_ms: float
) -> None:
    """One info line per batch: its size and failures, not a line per event (a busy
    redirect makes a visit per request, and each group handles it). A failed entry has
    its own warning or error line already (``sluice.consumers.outcomes``)."""
    if not log.is_enabled_for(logging.INFO):  # a line's arguments cost even when dropped
        return
    failures = sum(1 for e in failed.values() if not isinstance(e, (*SETTLED, NotYet)))
    log.info(
        "events handled",
        group=group,
        events=len(messages),
        failed=failures,
        duration_ms=round(duration_ms, 2),
    )


def log_events(
    group: str, deliveries: Sequence[Delivery], outcomes: Outcomes, duration_ms: float
) -> None:
    """A line per settled event, with the trace id of the request that caused it, at
    debug (``SLUICE_LOG_LEVEL=debug``), once its outcome is known: a redelivery of
    an event applied before says so rather than "handled" a second time. A failed
    entry has its own warning or error line (``sluice.consumers.outcomes``)."""
    if not log.is_enabled_for(logging.DEBUG):
        return
    for delivery in deliveries:
        m = delivery.message
        what = _SETTLED_AS.get(outcome_of(outcomes.get(m.key)))
        if what is None:
            continue
        log.debug(
            what,
            group=group,
            stream=m.stream,
            entry_id=m.entry_id,
            event_id=m.event_id,
            event_type=m.type,
            trace_id=m.trace_id,
            deliveries=m.deliveries,
            batch_ms=round(duration_ms, 2),
        )


# What the debug line per event says of each outcome that settled it.
_SETTLED_AS = {
    "handled": "event handled",
    "duplicate": "event applied before, acked without applying it again",
    "cancelled": "event's work cancelled, acked",
}


async def every(
    stop: asyncio.Event, seconds: float, job: Callable[[], Awaitable[int]], group: str
) -> None:
    """Run a consumer's background ``job`` every ``seconds`` until ``stop``; a failure is
    logged (an outage waits for the next time), a ``HeldBack`` ends it."""
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
                log.exception("consumer: background job failed", group=group)
        except Exception:
            log.exception("consumer: background job failed", group=group)
