"""What a reminder's fields must be, for ``POST`` and ``PATCH`` alike, and its answer.

Each check appends a ``FieldError`` naming the field and the reason, so one 422
lists every bad field. The cron checks walk occurrences (CPU work): callers run
them in the worker thread (``NextRuns.off_loop``).
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta

import msgspec

from sluice.app import Config, FieldError
from sluice.app.advanced import CronError, CronSchedule, min_interval, parse_cron, zone
from sluice.builtin.reminders.http.schemas import REMINDER_CRON_MAX, REMINDER_TEXT_MAX, ReminderOut
from sluice.builtin.reminders.settings import RemindersSettings
from sluice.builtin.reminders.stored import Reminder

# A one-shot is a delayed job, not a calendar: a year bounds how long a pending row
# (and the index entry that makes it cheap to find) can sit in the table.
AT_AHEAD_MAX = timedelta(days=365)


def reminder_out(reminder: Reminder, next_runs: list[datetime]) -> ReminderOut:
    one_shot = reminder.one_shot
    return ReminderOut(
        id=reminder.id,
        cron=None if one_shot else reminder.cron,
        timezone=None if one_shot else reminder.timezone,
        at=reminder.at,
        text=reminder.text,
        next_runs=next_runs,
        created_at=reminder.created_at,
        status=reminder.status,
    )


def one_shot_runs(reminder: Reminder) -> list[datetime]:
    """A one-shot's next runs: its instant while it will fire, else none."""
    return [reminder.at] if reminder.at is not None and reminder.status == "active" else []


def check_timezone(value: str | None, errors: list[FieldError]) -> str | None:
    if not value:
        errors.append(FieldError("timezone", "required: an IANA time zone such as Europe/Berlin"))
        return None
    try:
        zone(value)
    except CronError as exc:
        errors.append(FieldError("timezone", str(exc)))
        return None
    return value


def check_cron(
    value: str | None, timezone: str | None, config: Config, now: datetime, errors: list[FieldError]
) -> CronSchedule | None:
    """Syntax, then the shortest gap between occurrences (in the zone given, else UTC)."""
    expr = " ".join((value or "").split())
    if not expr:
        errors.append(
            FieldError(
                "cron",
                "required: six fields, seconds first (sec min hour day-of-month month day-of-week)",
            )
        )
        return None
    if len(expr) > REMINDER_CRON_MAX:
        errors.append(FieldError("cron", f"longer than {REMINDER_CRON_MAX} characters"))
        return None
    try:
        schedule = parse_cron(expr, timezone or "UTC")
        gap = min_interval(schedule, now)
    except (CronError, ValueError) as exc:
        errors.append(FieldError("cron", str(exc)))
        return None
    least = RemindersSettings.of(config).reminder_min_interval
    if gap < least:
        errors.append(
            FieldError(
                "cron",
                f"occurrences come as close as {gap:g} seconds apart; reminders must be at "
                f"least {least} seconds apart (SLUICE_REMINDER_MIN_INTERVAL)",
            )
        )
        return None
    return schedule


def _blank(text: str) -> bool:
    """Nothing a reader would see: spaces, controls, invisible formatting (zero-width)."""
    return all(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text)


def check_text(value: str | None, errors: list[FieldError]) -> str | None:
    if value is None or _blank(value):
        errors.append(FieldError("text", "required: what to remind you of, not blank"))
        return None
    if len(value) > REMINDER_TEXT_MAX:
        errors.append(FieldError("text", f"longer than {REMINDER_TEXT_MAX} characters"))
        return None
    return value


def check_at(value: str | None, now: datetime, errors: list[FieldError]) -> datetime | None:
    """An RFC 3339 instant with an offset, after ``now``, at most ``AT_AHEAD_MAX`` ahead;
    in UTC."""
    example = "an RFC 3339 instant with an offset, such as 2026-12-24T18:00:00+01:00"
    try:
        moment = msgspec.convert(value, datetime)
    except msgspec.ValidationError:
        errors.append(FieldError("at", f"required: {example}"))
        return None
    if moment.tzinfo is None:
        errors.append(FieldError("at", f"has no offset (Z or +01:00): {example}"))
        return None
    if moment <= now:
        errors.append(FieldError("at", "must be in the future"))
        return None
    if moment > now + AT_AHEAD_MAX:
        errors.append(FieldError("at", f"more than {AT_AHEAD_MAX.days} days ahead"))
        return None
    return moment.astimezone(UTC)
