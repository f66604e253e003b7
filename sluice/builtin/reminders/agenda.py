"""The next occurrence of every active reminder, earliest first: a runner's plan, no I/O.

Catch-up policy: a reminder's first slot is the first one after the latest of
its creation, its last fired slot and its last reschedule (a PATCH of the
schedule, or a resume); a slot older than ``catch_up`` before
now is skipped (logged once per skip), and the reminder resumes with the
first slot inside the window. Deletions seen on the stream leave a tombstone
until a database load that began after them, so a load read just before the
deletion committed cannot bring the reminder back.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from sluice.app.advanced import CronError, CronSchedule, parse_cron
from sluice.builtin.reminders.stored import Planned, Reminder

log = structlog.get_logger(__name__)


@dataclass
class Plan:
    reminder: Reminder
    schedule: CronSchedule
    next_slot: datetime
    added: float  # monotonic time the plan was made


class Agenda:
    def __init__(self, catch_up: timedelta) -> None:
        self.catch_up = catch_up
        self.skipped_late = 0  # times occurrences older than the window were skipped
        self._plans: dict[str, Plan] = {}
        self._heap: list[tuple[datetime, str]] = []  # entries of dropped plans go stale
        self._deleted: dict[str, float] = {}  # id -> monotonic time the deletion was seen

    def __len__(self) -> int:
        return len(self._plans)

    def first_slot(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def holds(self, plan: Plan) -> bool:
        return self._plans.get(plan.reminder.id) is plan

    def add(self, reminder: Reminder, last_fired: datetime | None, now: datetime) -> None:
        """Plan a reminder not planned yet (and not seen deleted)."""
        if reminder.id in self._plans or reminder.id in self._deleted:
            return
        try:
            schedule = parse_cron(reminder.cron, reminder.timezone)
            plan = Plan(reminder, schedule, reminder.created_at, time.monotonic())
            # Nothing before a PATCH of the schedule (or a resume) fires, however recent.
            after = max(
                reminder.created_at,
                last_fired or reminder.created_at,
                reminder.rescheduled_at or reminder.created_at,
            )
            plan.next_slot = self._skip_stale(plan, schedule.next_after(after), now)
        except ValueError as exc:  # CronError, or a stored time without a zone
            log.error("reminder cannot be scheduled", reminder_id=reminder.id, error=str(exc))
            return
        self._plans[reminder.id] = plan
        heapq.heappush(self._heap, (plan.next_slot, reminder.id))

    def drop(self, reminder_id: str) -> None:
        """Forget a deleted reminder for good."""
        self._deleted[reminder_id] = time.monotonic()
        self._plans.pop(reminder_id, None)

    def replace(self, active: Iterable[Planned], began: float, now: datetime) -> None:
        """Take the database's active reminders, read after monotonic time ``began``.

        Plans keep their next slot; a plan the database does not have is dropped
        unless the stream brought it in while the read was running.
        """
        active = list(active)
        ids = {p.reminder.id for p in active}
        for reminder_id in [i for i, p in self._plans.items() if i not in ids and p.added < began]:
            del self._plans[reminder_id]
        self._deleted = {i: seen for i, seen in self._deleted.items() if seen >= began}
        for planned in active:
            self.add(planned.reminder, planned.last_fired, now)
        self._heap = [(plan.next_slot, i) for i, plan in self._plans.items()]
        heapq.heapify(self._heap)

    def take_due(self, now: datetime, limit: int) -> list[Plan]:
        """Up to ``limit`` plans whose slot has come, out of the heap until ``put_back``.

        A slot already older than the catch-up window (the store or the loop was
        stuck that long) is skipped here rather than fired late.
        """
        due: list[Plan] = []
        while self._heap and self._heap[0][0] <= now and len(due) < limit:
            slot, reminder_id = heapq.heappop(self._heap)
            plan = self._plans.get(reminder_id)
            if plan is None or plan.next_slot != slot:
                continue  # a stale entry
            if slot >= now - self.catch_up:
                due.append(plan)
            elif self._move(plan, now):
                heapq.heappush(self._heap, (plan.next_slot, reminder_id))
        return due

    def put_back(self, plans: Iterable[Plan]) -> None:
        for plan in plans:
            if self.holds(plan):
                heapq.heappush(self._heap, (plan.next_slot, plan.reminder.id))

    def advance(self, plan: Plan, now: datetime) -> None:
        """Move a plan past the slot it just had; ``put_back`` files it again."""
        self._move(plan, now, after=plan.next_slot)

    def _move(self, plan: Plan, now: datetime, after: datetime | None = None) -> bool:
        """Set the next slot: the first after ``after`` (None: keep the current one), or
        the first inside the catch-up window; False when the reminder has none left."""
        try:
            slot = plan.next_slot if after is None else plan.schedule.next_after(after)
            plan.next_slot = self._skip_stale(plan, slot, now)
        except CronError as exc:  # no occurrence left within the cron library's horizon
            log.warning(
                "reminder has no further occurrence", reminder_id=plan.reminder.id, error=str(exc)
            )
            self._plans.pop(plan.reminder.id, None)
            return False
        return True

    def _skip_stale(self, plan: Plan, slot: datetime, now: datetime) -> datetime:
        """``slot``, or when it is older than the window the first slot inside it (logged)."""
        horizon = now - self.catch_up
        if slot >= horizon:
            return slot
        resume = plan.schedule.next_after(horizon)
        self.skipped_late += 1
        log.warning(
            "reminder occurrences older than the catch-up window skipped",
            reminder_id=plan.reminder.id,
            first_skipped=slot.isoformat(),
            resume_at=resume.isoformat(),
        )
        return resume
