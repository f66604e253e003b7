"""Reminders' next runs for the API, without walking a cron on the event loop per request.

Walking a rare schedule is slow: ``0 0 0 29 2 */7`` (29 February on a Sunday)
has its next three runs in 2032, 2060 and 2088, and cronsim gets there day by
day through every February, some 4 ms of CPU each time. A hundred such
reminders made every ``GET /v1/reminders`` cost half a second of the event
loop. Instead:

- a ``Window`` is a run of consecutive occurrences after a moment. It answers
  "the next three after now" for every later ``now`` until its third-last run
  has passed, and it is the same for every reminder with that cron and zone;
- a reminder's window is computed when it is created, in the thread that
  checks its cron anyway, and stored with it (``sluice.builtin.reminders.next_runs``): a
  rare schedule's window holds for decades, in every process, after restarts;
- each process keeps the windows it used last in memory (frequent schedules'
  stored windows go stale within minutes; recomputing them is cheap);
- whatever is still missing is computed in a worker thread, one computation at
  a time per process (``NextRuns.off_loop``, which the cron checks of
  ``POST /v1/reminders`` go through too).

A thread is not free: its pure-Python CPU holds the GIL against the event loop
(one busy thread cut a bare aiohttp handler from about 16,000 to 1,700
requests/s on the 2-core reference machine), so what a thread computes is kept
rare and bounded, not merely moved off the loop.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ParamSpec, TypeVar

import structlog

from sluice.app import Store
from sluice.app.advanced import CronError, CronSchedule, parse_cron
from sluice.builtin.reminders import next_runs as stored
from sluice.builtin.reminders.next_runs import StoredRuns

log = structlog.get_logger(__name__)

NEXT_RUNS = 3  # what the API shows per reminder
# A window holds at least NEXT_RUNS runs, and up to WINDOW_MAX of those within WINDOW_SPAN
# after its start: an every-minute schedule's window then lasts 13 minutes, while a rare
# one's costs no more than its first three runs.
WINDOW_MAX = 16
WINDOW_SPAN = timedelta(days=1)
CACHED_WINDOWS = 4096  # per process, by (cron, zone); least recently used go first

Key = tuple[str, str]  # (cron, timezone)
P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Window:
    after: datetime
    runs: tuple[datetime, ...]  # the first occurrences after ``after``, consecutive
    complete: bool  # no occurrence follows the last of ``runs``

    def next_runs(self, now: datetime) -> list[datetime] | None:
        """The first ``NEXT_RUNS`` occurrences after ``now``; None when this window cannot tell."""
        if now < self.after:
            return None
        first = bisect.bisect_right(self.runs, now)
        runs = list(self.runs[first : first + NEXT_RUNS])
        return runs if len(runs) == NEXT_RUNS or self.complete else None


def window(schedule: CronSchedule, after: datetime) -> Window:
    """The window of ``schedule`` from ``after``: CPU-bound, for a worker thread."""
    runs = schedule.next_runs(after, NEXT_RUNS)
    if len(runs) < NEXT_RUNS:
        return Window(after, tuple(runs), complete=True)
    try:
        until = after + WINDOW_SPAN
    except OverflowError:  # the year 9999
        return Window(after, tuple(runs), complete=False)
    more = schedule.next_runs(runs[-1], WINDOW_MAX - NEXT_RUNS, until) if runs[-1] < until else []
    return Window(after, (*runs, *more), complete=False)


def _windows(keys: Iterable[Key], after: datetime) -> dict[Key, Window]:
    found = {}
    for cron, timezone in keys:
        try:
            found[(cron, timezone)] = window(parse_cron(cron, timezone), after)
        except (CronError, ValueError) as exc:
            # Stored valid; a later cron library may read it otherwise. Listing must not fail.
            log.warning(
                "stored reminder no longer parses", cron=cron, timezone=timezone, error=str(exc)
            )
            found[(cron, timezone)] = Window(after, (), complete=True)
    return found


def to_stored(key: Key, found: Window) -> StoredRuns:
    return StoredRuns(key[0], key[1], found.after, found.runs, found.complete)


class NextRuns:
    """One process's next runs of reminders: memory, then the stored windows, then a thread."""

    def __init__(self, size: int = CACHED_WINDOWS) -> None:
        self.size = size
        self.computed = 0  # windows computed in the thread for listings (tests read it)
        self._windows: OrderedDict[Key, Window] = OrderedDict()
        self._thread = asyncio.Semaphore(1)

    async def off_loop(self, work: Callable[P, T], *args: P.args, **kw: P.kwargs) -> T:
        """Run cron work in a worker thread, one piece at a time per process."""
        async with self._thread:
            return await asyncio.to_thread(work, *args, **kw)

    def remember(self, key: Key, found: Window) -> None:
        self._windows[key] = found
        self._windows.move_to_end(key)
        while len(self._windows) > self.size:
            self._windows.popitem(last=False)

    def _cached(self, key: Key, now: datetime) -> list[datetime] | None:
        found = self._windows.get(key)
        runs = None if found is None else found.next_runs(now)
        if runs is not None:
            self._windows.move_to_end(key)
        return runs

    async def of(
        self, store: Store, reminders: dict[str, Key], now: datetime
    ) -> dict[str, list[datetime]]:
        """The next runs of each reminder (id -> (cron, timezone)) after ``now``."""
        answers: dict[str, list[datetime]] = {}
        for reminder_id, key in reminders.items():
            if (runs := self._cached(key, now)) is not None:
                answers[reminder_id] = runs
        missing = [i for i in reminders if i not in answers]
        for reminder_id, row in (await stored.load(store, missing)).items():
            key = reminders[reminder_id]
            if (row.cron, row.timezone) != key:
                continue  # the reminder's schedule changed since: not its window
            found = Window(row.after, row.runs, row.complete)
            if (runs := found.next_runs(now)) is not None:
                self.remember(key, found)
                answers[reminder_id] = runs
        keys = sorted({key for i, key in reminders.items() if i not in answers})
        if keys:
            computed = await self.off_loop(_windows, keys, now)
            self.computed += len(computed)
            for key, found in computed.items():
                self.remember(key, found)
            for reminder_id, key in reminders.items():
                if reminder_id not in answers:
                    answers[reminder_id] = computed[key].next_runs(now) or []
        return answers
