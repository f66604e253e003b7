"""Things due at an instant fired within a second of it, by any number of replicas: the
reminders app's one-shot reminders and the apps' delayed jobs (``sluice.app.jobs``).

Such things are not loaded: a deployment may hold a million pending ones. Each
replica's ``OneShotRunner`` asks a due-time index (the ``Due`` it is given: for
one-shot reminders, ``sluice.builtin.reminders.one_shots``) for the earliest pending
instant, sleeps until it (at most ``poll`` seconds, so a one-shot created or moved
meanwhile is seen in time), then claims and fires what is due in batches of ``batch``, one
transaction each, until nothing due is left. A tick is one index seek; only a
tick that finds something due opens a write transaction.

Nothing here needs Redis: a one-shot fires from the database alone, through
Redis outages, and one that fell due while no scheduler ran fires late (once)
when one starts; it is never dropped, unlike a cron occurrence older than the
catch-up window, since a one-shot has no next occurrence to wait for.

A runner is given the ``Due`` it fires: one per kind of thing, each with its own table.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from sluice.aio.waiting import wait_or_stop
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.store import Store

log = structlog.get_logger(__name__)

POLL_S = 0.25  # the longest a one-shot created (or moved) due soon waits to be seen
BATCH = 500  # one-shots fired per transaction
FIRST_BACKOFF, MAX_BACKOFF = 0.1, 5.0


@dataclass(frozen=True)
class Due:
    """What a runner fires: the earliest pending instant, and the claim of what is due,
    which returns the events it appended (each with ``scheduled_for`` and ``trace_id``),
    and how long to wait when the claim fired nothing."""

    what: str  # for the logs: "one-shot reminders", "delayed jobs"
    next_due: Callable[[Store], Awaitable[datetime | None]]
    fire_due: Callable[[Store, datetime, int], Awaitable[Sequence[Any]]]
    # The wait after a tick that found something due but fired nothing: another replica
    # holds it (it commits soon), or it is held back on purpose (delayed jobs whose
    # groups have no room: sluice.app.job_flow), then a poll.
    idle: float = 0.02


@dataclass
class OneShotCounters:
    fired: int = 0
    batches: int = 0


class OneShotRunner:
    """Fires the one-shots a ``Due`` index holds within a second of their instant, on
    any number of replicas: ``run`` until stopped (the module's notes)."""

    def __init__(
        self,
        resources: Resources,
        *,
        holder: str,
        poll: float = POLL_S,
        batch: int = BATCH,
        due: Due,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.resources = resources
        self.due = due
        self.holder = holder
        self.poll = poll
        self.batch = batch
        self.clock = clock
        self.counters = OneShotCounters()

    async def run(self, stop: asyncio.Event) -> None:
        """Fire due one-shots until ``stop`` is set; store outages are waited out."""
        backoff = FIRST_BACKOFF
        log.info("one-shot runner started", holder=self.holder, fires=self.due.what)
        while not stop.is_set():
            try:
                delay = await self.tick()
            except Exception as exc:  # a store outage, or a bug: logged, retried, never fatal
                log.error(
                    "one-shot runner failed, retrying",
                    fires=self.due.what,
                    error=repr(exc),
                    retry_in=backoff,
                )
                await wait_or_stop(stop, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = FIRST_BACKOFF
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()

    async def tick(self) -> float:
        """Fire what is due (a batch); how long to sleep before the next look."""
        store = self.resources.store
        first = await self.due.next_due(store)
        now = self.clock()
        if first is None or first > now:
            return self.poll if first is None else min((first - now).total_seconds(), self.poll)
        fired = await self.due.fire_due(store, now, self.batch)
        self.counters.batches += 1
        self.counters.fired += len(fired)
        # One line per batch: at 10,000 due in a second, a line each cost more CPU than
        # the firing. Each reminder's trace id (what its mail carries) at debug level.
        if fired:
            log.info(
                f"{self.due.what} fired",
                count=len(fired),
                holder=self.holder,
                first_at=fired[0].scheduled_for.isoformat(),
                most_late_ms=int((now - fired[0].scheduled_for).total_seconds() * 1000),
            )
        for event in fired:
            log.debug(
                "fired",
                what=self.due.what,
                event_id=event.event_id,
                at=event.scheduled_for.isoformat(),
                trace_id=event.trace_id,
            )
        # More may be due: look again at once; or another replica holds them: let it commit.
        return 0.0 if fired else min(self.due.idle, self.poll)
