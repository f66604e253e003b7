"""The reminders app's event types: what it commits to the history (and the outbox) together
with its state, published on the streams of its aggregates (reminders)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from sluice.app import Event
from sluice.builtin.reminders.app import app

app.aggregate("reminders", key="reminder_id")


@app.event
class ReminderCreated(Event, frozen=True, kw_only=True, tag=True):
    """A user made a reminder: recurring (``cron`` read in ``timezone``) or one-shot
    (``at``)."""

    aggregate: ClassVar[str] = "reminders"
    reminder_id: str
    owner_id: str
    cron: str  # '' for a one-shot
    timezone: str  # '' for a one-shot
    text: str
    at: datetime | None = None  # a one-shot's instant (docs/guides/tasks.md)


@app.event
class ReminderDeleted(Event, frozen=True, kw_only=True, tag=True):
    """A user deleted a reminder; no occurrence of it comes due any more."""

    aggregate: ClassVar[str] = "reminders"
    reminder_id: str
    owner_id: str


@app.event
class ReminderUpdated(Event, frozen=True, kw_only=True, tag=True):
    """The reminder's whole new state (paused by a one-click unsubscribe, or a PATCH)."""

    aggregate: ClassVar[str] = "reminders"
    reminder_id: str
    owner_id: str
    cron: str
    timezone: str
    text: str
    paused: bool = False
    at: datetime | None = None  # a one-shot's instant (docs/guides/tasks.md)


@app.event
class ReminderDue(Event, frozen=True, kw_only=True, tag=True):
    """An occurrence of a reminder came, once (the scheduler's once-per-occurrence); the
    mail group mails it. ``email``, ``name`` and ``timezone`` are filled in by the
    scheduler when it fires, so the mail needs no lookup."""

    aggregate: ClassVar[str] = "reminders"
    reminder_id: str
    owner_id: str
    scheduled_for: datetime
    text: str
    email: str = ""
    name: str | None = None
    timezone: str = "UTC"
