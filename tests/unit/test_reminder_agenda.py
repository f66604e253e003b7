"""A runner's agenda of reminder occurrences: catch-up window, reloads and deletions."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from sluice.builtin.reminders.agenda import Agenda
from sluice.builtin.reminders.stored import Planned, Reminder

NOW = datetime(2030, 3, 1, 12, 0, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def reminder(
    reminder_id: str = "r1", created: datetime = NOW, cron: str = "0 * * * * *"
) -> Reminder:
    return Reminder(
        id=reminder_id, owner_id="u1", cron=cron, timezone="UTC", text="t", created_at=created
    )


def test_a_new_reminder_starts_after_its_creation_and_fires_in_order() -> None:
    agenda = Agenda(timedelta(minutes=5))
    agenda.add(reminder(created=NOW + timedelta(seconds=1)), None, NOW)
    assert agenda.take_due(NOW + MINUTE - timedelta(seconds=1), 10) == []
    [plan] = agenda.take_due(NOW + MINUTE, 10)
    assert plan.next_slot == NOW + MINUTE
    agenda.advance(plan, NOW + MINUTE)
    agenda.put_back([plan])
    assert agenda.first_slot() == NOW + 2 * MINUTE
    assert agenda.skipped_late == 0


def test_missed_slots_inside_the_window_fire_late_older_ones_are_skipped() -> None:
    agenda = Agenda(timedelta(minutes=5))
    agenda.add(reminder(created=NOW - 60 * MINUTE), None, NOW)
    due = agenda.take_due(NOW, 10)
    assert [p.next_slot for p in due] == [NOW - 4 * MINUTE]  # the oldest inside the window
    assert agenda.skipped_late == 1

    # Already fired up to 2 minutes ago (another replica): resume right after that.
    other = Agenda(timedelta(minutes=5))
    other.add(reminder(created=NOW - 60 * MINUTE), NOW - 2 * MINUTE, NOW)
    assert other.first_slot() == NOW - MINUTE
    assert other.skipped_late == 0


def test_a_slot_that_went_stale_while_waiting_is_skipped_not_fired() -> None:
    agenda = Agenda(timedelta(minutes=5))
    agenda.add(reminder(), None, NOW)
    later = NOW + 30 * MINUTE  # the store was down for half an hour
    [plan] = agenda.take_due(later, 10)
    assert plan.next_slot == later - 4 * MINUTE
    assert agenda.skipped_late == 1


def test_a_reload_keeps_stream_additions_and_never_revives_a_deletion() -> None:
    agenda = Agenda(timedelta(minutes=5))
    agenda.add(reminder("old"), None, NOW)
    agenda.add(reminder("deleted"), None, NOW)
    began = time.monotonic()
    agenda.add(reminder("new"), None, NOW)  # from the stream while the database was read
    agenda.drop("deleted")  # likewise
    # The read saw neither the new reminder nor the deletion; "old" is gone meanwhile.
    agenda.replace([Planned(reminder("deleted"), None)], began, NOW)
    assert len(agenda) == 1
    [plan] = agenda.take_due(NOW + MINUTE, 10)
    assert plan.reminder.id == "new"
    # A later read that saw the deletion forgets the tombstone with no effect.
    agenda.replace([Planned(reminder("new"), None)], time.monotonic(), NOW)
    assert len(agenda) == 1
