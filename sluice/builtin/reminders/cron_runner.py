"""Users' reminders fired once per occurrence, by any number of scheduler replicas.

Each replica runs a ``ReminderRunner``. It loads the active reminders (neither
deleted nor paused) from the database, follows ``ReminderCreated``,
``ReminderDeleted`` and ``ReminderUpdated`` (a pause or a PATCH) on the reminders stream
of every partition with a plain ``XREAD`` (each stream's end is pinned before
the load, so no change falls between; on a cluster, a reader per partition),
and reloads everything every ``reload_seconds`` to heal whatever an outage hid.
It keeps the next occurrence of every reminder in a heap and sleeps until the
first one, waking early on a change.

Firing an occurrence (reminder, slot = its UTC instant):

1. claim ``<prefix>:reminder:<id>:slot:<slot>`` in Redis (``SET NX PX``, ten
   minutes; a claim already ours counts as ours). Taken by another replica: skip.
   Redis down: go on without the claim, the database decides alone;
2. in one transaction: the reminder must be neither deleted nor paused, the
   ``reminder_occurrences`` row is inserted (a conflict: it fired already,
   nothing more), ``ReminderDue`` is appended with the owner's address.

The row is the exactly-once guarantee; the claim only spares the database the
losing attempts. A deletion (or a pause) and a firing are ordered by the database,
so once a deletion or a pause commits nothing of that reminder fires anywhere.

After a restart or an outage, occurrences missed within the last
``catch_up_seconds`` (and after the reminder was created and last fired) fire
late, once; older ones are skipped and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis.exceptions
import structlog
from redis.typing import KeyT, StreamIdT

from sluice.app import Resources, new_trace_id, utcnow
from sluice.app.advanced import cancel_and_wait, decode, first_of, slot_groups, wait_or_stop
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.agenda import Agenda, Plan
from sluice.builtin.reminders.events import ReminderCreated, ReminderDeleted, ReminderUpdated
from sluice.builtin.reminders.keys import RemindersKeys
from sluice.builtin.reminders.stored import Fired, Reminder

log = structlog.get_logger(__name__)

# Past the catch-up window and any clock skew; the occurrence row stays the last word.
# Short, so claims of frequent reminders do not pile up in Redis.
CLAIM_TTL_MS = 10 * 60 * 1000
BATCH = 200  # occurrences fired per transaction
XREAD_BLOCK_MS = 1000
MAX_SLEEP = 30.0  # sleep in slices, so a wall-clock jump is noticed
FIRST_BACKOFF, MAX_BACKOFF = 0.1, 5.0
_FOLLOWED = {b"ReminderCreated", b"ReminderDeleted", b"ReminderUpdated"}
# RedisClusterException: a cluster client's own (no node reachable, a slot not served).
_REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)
# The last entry id read of each followed stream.
_After = dict[KeyT, StreamIdT]

# One claim per key; a key already holding our holder is ours (a retry after a failed commit).
# The keys of one call share a slot (``_claim``); sent with EVAL, so that a cluster
# pipeline takes it (it refuses EVALSHA).
_CLAIM = """
local mine = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) or redis.call('GET', key) == ARGV[1]
  then mine[i] = 1 else mine[i] = 0 end
end
return mine
"""


def slot_text(slot: datetime) -> str:
    return slot.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


@dataclass
class ReminderCounters:
    fired: int = 0
    already_fired: int = 0  # lost the database race (another replica, or Redis was down)
    claimed_elsewhere: int = 0


class _Backoff:
    def __init__(self) -> None:
        self.delay = FIRST_BACKOFF

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, MAX_BACKOFF)
        return delay

    def reset(self) -> None:
        self.delay = FIRST_BACKOFF


class ReminderRunner:
    def __init__(
        self,
        resources: Resources,
        *,
        holder: str,
        catch_up_seconds: float = 300.0,
        reload_seconds: float = 30.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.resources = resources
        self.holder = holder
        self.reload_seconds = reload_seconds
        self.clock = clock
        self.counters = ReminderCounters()
        self.loaded = asyncio.Event()  # set after the first successful load
        self.agenda = Agenda(timedelta(seconds=catch_up_seconds))
        self._changed = asyncio.Event()
        self._reload_wanted = True
        self._reload_at = 0.0
        self._claims_down = False
        keys = resources.keys
        streams = [keys.stream(ReminderCreated.aggregate, p) for p in keys.numbers]
        self._stream_groups = slot_groups(resources.redis, streams)  # one XREAD each

    @property
    def scheduled(self) -> int:
        """Reminders this runner follows."""
        return len(self.agenda)

    async def run(self, stop: asyncio.Event) -> None:
        """Fire occurrences until ``stop`` is set; outages are waited out, never fatal."""
        pinned = await asyncio.gather(*(self._pin_first(g) for g in self._stream_groups))
        followers = [
            asyncio.create_task(self._follow(stop, streams, after))
            for streams, after in zip(self._stream_groups, pinned, strict=True)
        ]
        log.info("reminder runner started", holder=self.holder)
        try:
            await self._loop(stop)
        finally:
            for follower in followers:
                await cancel_and_wait(follower)

    async def _loop(self, stop: asyncio.Event) -> None:
        backoff = _Backoff()
        while not stop.is_set():
            self._changed.clear()
            try:
                if self._reload_wanted or time.monotonic() >= self._reload_at:
                    await self._reload()
                await self._fire_due()
            except Exception as exc:  # a store outage, or a bug: logged, retried, never fatal
                delay = backoff.next()
                log.error("reminder runner failed, retrying", error=repr(exc), retry_in=delay)
                await wait_or_stop(stop, delay)
                continue
            backoff.reset()
            await self._sleep(stop)

    async def _reload(self) -> None:
        """Plan the database's active reminders; drop those it no longer has."""
        self._reload_wanted = False  # a request arriving during the load asks for another
        began = time.monotonic()
        try:
            active = await stored.all_active(self.resources.store)
        except BaseException:
            self._reload_wanted = True
            raise
        self.agenda.replace(active, began, self.clock())
        self._reload_at = time.monotonic() + self.reload_seconds
        if not self.loaded.is_set():
            log.info("reminders loaded", count=len(self.agenda), holder=self.holder)
        self.loaded.set()

    # Firing -----------------------------------------------------------------

    async def _fire_due(self) -> None:
        now = self.clock()
        due = self.agenda.take_due(now, BATCH)
        if not due:
            return
        try:
            await self._fire(due, now)
        finally:
            # Advanced on success; on failure the same slots go back to be tried again.
            self.agenda.put_back(due)

    async def _claims(self, due: list[Plan]) -> list[bool]:
        keys = self.resources.keys
        names = [
            RemindersKeys(keys.prefix).reminder_occurrence(p.reminder.id, slot_text(p.next_slot))
            for p in due
        ]
        try:
            mine = await self._claim(names)
        except _REDIS_ERRORS as exc:
            if not self._claims_down:
                log.warning(
                    "reminder claims unavailable, the database decides alone", error=repr(exc)
                )
            self._claims_down = True
            return [True] * len(due)
        if self._claims_down:
            log.info("reminder claims available again")
            self._claims_down = False
        return [mine[name] for name in names]

    async def _claim(self, names: list[str]) -> dict[str, bool]:
        """Claim every key: a script per slot on a cluster (up to ``BATCH`` of them, one
        round trip per primary), one for all on a single Redis."""
        groups = slot_groups(self.resources.redis, names)
        async with self.resources.redis.pipeline(transaction=False) as pipe:
            for group in groups:
                pipe.eval(_CLAIM, len(group), *group, self.holder, CLAIM_TTL_MS)
            replies: list[Any] = await pipe.execute()
        return {
            name: bool(int(flag))
            for group, flags in zip(groups, replies, strict=True)
            for name, flag in zip(group, flags, strict=True)
        }

    async def _fire(self, due: list[Plan], now: datetime) -> None:
        claims = await self._claims(due)
        mine = [plan for plan, claimed in zip(due, claims, strict=True) if claimed]
        self.counters.claimed_elsewhere += len(due) - len(mine)
        traces = [new_trace_id() for _ in mine]
        outcomes = await stored.fire_many(
            self.resources.store,
            [
                (p.reminder.id, p.next_slot, t, (p.reminder.cron, p.reminder.timezone))
                for p, t in zip(mine, traces, strict=True)
            ],
            now,
        )
        for plan, outcome, trace_id in zip(mine, outcomes, traces, strict=True):
            self._note(plan, outcome, trace_id, now)
        for plan in due:
            if self.agenda.holds(plan):
                self.agenda.advance(plan, now)

    def _note(self, plan: Plan, outcome: Fired, trace_id: str, now: datetime) -> None:
        reminder_id, slot = plan.reminder.id, plan.next_slot
        if outcome is Fired.FIRED:
            self.counters.fired += 1
            log.info(
                "reminder fired",
                reminder_id=reminder_id,
                slot=slot.isoformat(),
                late_ms=int((now - slot).total_seconds() * 1000),
                holder=self.holder,
                trace_id=trace_id,
            )
        elif outcome is Fired.ALREADY:
            self.counters.already_fired += 1
        elif outcome is Fired.PAUSED:
            log.info("reminder paused, not fired", reminder_id=reminder_id, slot=slot.isoformat())
            self.agenda.drop(reminder_id)
        elif outcome is Fired.CHANGED:
            # PATCHed before this slot's transaction: plan the new schedule from the database.
            log.info(
                "reminder changed, old slot not fired",
                reminder_id=reminder_id,
                slot=slot.isoformat(),
            )
            self.agenda.drop(reminder_id)
            self._reload_wanted = True
        else:
            log.info("reminder deleted, not fired", reminder_id=reminder_id, slot=slot.isoformat())
            self.agenda.drop(reminder_id)

    async def _sleep(self, stop: asyncio.Event) -> None:
        """Until the first slot, the next reload or a change, whichever comes first."""
        delay = min(self._reload_at - time.monotonic(), MAX_SLEEP)
        first = self.agenda.first_slot()
        if first is not None:
            delay = min(delay, (first - self.clock()).total_seconds())
        if delay <= 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await first_of(stop, self._changed)

    # Following the stream ---------------------------------------------------

    async def _pin(self, streams: list[str]) -> _After:
        """The id of each stream's last entry (``0-0`` when empty): read on from there."""
        redis = self.resources.redis
        newest: list[Any] = await asyncio.gather(*(redis.xrevrange(s, count=1) for s in streams))
        return {s: n[0][0] if n else "0-0" for s, n in zip(streams, newest, strict=True)}

    async def _pin_first(self, streams: list[str]) -> _After | None:
        try:
            return await self._pin(streams)
        except _REDIS_ERRORS as exc:
            log.warning("reminder stream unavailable, following it later", error=repr(exc))
            return None

    async def _follow(self, stop: asyncio.Event, streams: list[str], after: _After | None) -> None:
        """Apply changes from ``streams``; after an outage, pin their ends again and reload."""
        backoff = _Backoff()
        while not stop.is_set():
            try:
                if after is None:
                    after = await self._pin(streams)
                    # Changes may have been missed while away: the database has them all.
                    self._reload_wanted = True
                    self._changed.set()
                    log.info("reminder stream followed again", after=list(after.values()))
                await self._read(after)
            except Exception as exc:  # Redis down mostly; never let the follower die
                if after is not None:
                    log.warning("reminder stream read failed, reconnecting", error=repr(exc))
                after = None
                await wait_or_stop(stop, backoff.next())
                continue
            backoff.reset()

    async def _read(self, after: _After) -> None:
        """Apply what follows ``after`` in its streams, and move ``after`` past it."""
        reply: Any = await self.resources.redis.xread(after, count=500, block=XREAD_BLOCK_MS)
        for stream, entries in reply or ():
            name = stream.decode() if isinstance(stream, bytes) else stream
            for entry_id, fields in entries:
                self._apply(fields)
                after[name] = entry_id

    def _apply(self, fields: dict[bytes, bytes]) -> None:
        if fields.get(b"type") not in _FOLLOWED or b"data" not in fields:
            return
        try:
            event = decode(fields[b"data"])
        except ValueError as exc:  # msgspec's DecodeError and ValidationError
            log.warning("undecodable entry on the reminders stream, skipped", error=str(exc))
            return
        if getattr(event, "at", None) is not None:
            # A one-shot: fired from the store's due index (scheduler.one_shots).
            return
        if isinstance(event, ReminderCreated):
            reminder = Reminder(
                id=event.reminder_id,
                owner_id=event.owner_id,
                cron=event.cron,
                timezone=event.timezone,
                text=event.text,
                created_at=event.occurred_at,
            )
            self.agenda.add(reminder, None, self.clock())
        elif isinstance(event, ReminderDeleted):
            self.agenda.drop(event.reminder_id)
        elif isinstance(event, ReminderUpdated):
            # Out of the plan at once; unless paused, a load that begins after this brings
            # it back in its new state (from the database, with its last fired slot and
            # its rescheduled_at). A slot of the old plan already in its firing transaction
            # is ordered by the database: before the PATCH it fires, after it is CHANGED.
            self.agenda.drop(event.reminder_id)
            if not event.paused:
                self._reload_wanted = True
        self._changed.set()
