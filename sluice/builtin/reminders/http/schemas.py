"""The reminders app's request and response bodies (the OpenAPI schemas derive from them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

REMINDER_TEXT_MAX = 1000
REMINDER_CRON_MAX = 200

ReminderCron = Annotated[
    str,
    msgspec.Meta(
        description="six fields, seconds first: sec min hour day-of-month month day-of-week",
        extra_json_schema={"maxLength": REMINDER_CRON_MAX, "examples": ["0 30 8 * * MON-FRI"]},
    ),
]
ReminderText = Annotated[
    str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": REMINDER_TEXT_MAX})
]


ReminderZone = Annotated[str, msgspec.Meta(examples=["Europe/Berlin"])]
# Checked by the view (422 with the reason), not decoded as a datetime (400).
ReminderAt = Annotated[
    str,
    msgspec.Meta(
        description="a one-shot's instant: RFC 3339 with an offset, in the future, at most "
        "a year ahead",
        extra_json_schema={"format": "date-time", "examples": ["2026-12-24T18:00:00+01:00"]},
    ),
]


class ReminderBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``{cron, timezone, text}`` (a cron reminder) or ``{at, text}`` (a one-shot)."""

    cron: ReminderCron | None = None
    timezone: ReminderZone | None = None
    text: ReminderText | None = None
    at: ReminderAt | None = None


class ReminderPatch(msgspec.Struct, kw_only=True):
    """The fields to change, at least one (a cron reminder: not ``at``; a one-shot: not
    ``cron`` nor ``timezone``). An unknown field is a 422, named by the view."""

    cron: ReminderCron | None = None
    timezone: ReminderZone | None = None
    text: ReminderText | None = None
    paused: bool | None = None
    at: ReminderAt | None = None


class ReminderOut(msgspec.Struct, kw_only=True):
    id: str
    cron: str | None  # null for a one-shot
    timezone: str | None  # null for a one-shot
    at: datetime | None  # a one-shot's instant (UTC); null for a cron reminder
    text: str
    next_runs: list[datetime]  # the next three occurrences, in UTC (a one-shot: its instant)
    created_at: datetime
    # paused: by a PATCH or the one-click unsubscribe of its mails; it does not fire.
    # done: a one-shot that fired.
    status: Literal["active", "paused", "done"] = "active"


class ReminderList(msgspec.Struct, kw_only=True):
    items: list[ReminderOut]
