"""The caller's reminders: create (validated cron), list, delete.

A reminder and its ``ReminderCreated`` (or its deletion and
``ReminderDeleted``) commit in one transaction; every scheduler replica
follows those events, and checks the reminder in the database again before
each occurrence fires.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime

from aiohttp import web

from sluice.config import Config
from sluice.errors import FieldError, NotFound, Unprocessable
from sluice.events import ReminderCreated, ReminderDeleted, utcnow, uuid7
from sluice.http.apidoc import BAD_BODY, UNAUTHORIZED, USER, Route, ok, problem, request_body
from sluice.http.auth import require_user
from sluice.http.bodies import json_response, read_json
from sluice.http.keys import CONFIG, STORE, TRACE_ID, UPCOMING
from sluice.http.schemas import (
    REMINDER_CRON_MAX,
    REMINDER_TEXT_MAX,
    ReminderBody,
    ReminderList,
    ReminderOut,
)
from sluice.scheduler.cron import CronError, CronSchedule, min_interval, parse_cron, zone
from sluice.scheduler.upcoming import Window, to_stored, window
from sluice.store import next_runs
from sluice.store import reminders as store
from sluice.store.reminders import Reminder

ACTIVE_MAX = 100  # active reminders per user


def _out(reminder: Reminder, next_runs: list[datetime]) -> ReminderOut:
    return ReminderOut(
        id=reminder.id, cron=reminder.cron, timezone=reminder.timezone, text=reminder.text,
        next_runs=next_runs, created_at=reminder.created_at,
        status="active" if reminder.paused_at is None else "paused",
    )  # fmt: skip


def _check_timezone(value: str | None, errors: list[FieldError]) -> str | None:
    if not value:
        errors.append(FieldError("timezone", "required: an IANA time zone such as Europe/Berlin"))
        return None
    try:
        zone(value)
    except CronError as exc:
        errors.append(FieldError("timezone", str(exc)))
        return None
    return value


def _check_cron(
    value: str | None, timezone: str | None, config: Config, now: datetime, errors: list[FieldError]
) -> CronSchedule | None:
    """Syntax, then the shortest gap between occurrences (in the zone given, else UTC)."""
    expr = " ".join((value or "").split())
    if not expr:
        errors.append(FieldError("cron", "required: six fields, seconds first (sec min hour "
                                         "day-of-month month day-of-week)"))  # fmt: skip
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
    least = config.reminder_min_interval
    if gap < least:
        errors.append(FieldError(
            "cron", f"occurrences come as close as {gap:g} seconds apart; reminders must be at "
                    f"least {least} seconds apart (SLUICE_REMINDER_MIN_INTERVAL)",
        ))  # fmt: skip
        return None
    return schedule


def _blank(text: str) -> bool:
    """Nothing a reader would see: spaces, controls, invisible formatting (zero-width)."""
    return all(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text)


def _check_text(value: str | None, errors: list[FieldError]) -> str | None:
    if value is None or _blank(value):
        errors.append(FieldError("text", "required: what to remind you of, not blank"))
        return None
    if len(value) > REMINDER_TEXT_MAX:
        errors.append(FieldError("text", f"longer than {REMINDER_TEXT_MAX} characters"))
        return None
    return value


def _validated(body: ReminderBody, config: Config, now: datetime) -> tuple[CronSchedule, str]:
    """The schedule (in the reminder's zone) and the text, or a 422 naming every bad field."""
    errors: list[FieldError] = []
    timezone = _check_timezone(body.timezone, errors)
    schedule = _check_cron(body.cron, timezone, config, now, errors)
    text = _check_text(body.text, errors)
    if errors or schedule is None or timezone is None or text is None:
        raise Unprocessable("invalid reminder", errors)
    return schedule, text


def _checked(body: ReminderBody, config: Config, now: datetime) -> tuple[CronSchedule, str, Window]:
    """The checks, then the reminder's next runs (``sluice.scheduler.upcoming``): CPU work."""
    schedule, text = _validated(body, config, now)
    return schedule, text, window(schedule, now)


def _over_cap(count: int) -> Unprocessable:
    message = f"you have {count} active reminders, the most allowed is {ACTIVE_MAX}; delete one"
    return Unprocessable("too many reminders", [FieldError("reminders", message)])


async def create_reminder(request: web.Request) -> web.Response:
    """A new reminder and ``ReminderCreated`` in one transaction; 201 with its next runs."""
    user = await require_user(request)
    body = await read_json(request, ReminderBody)
    now = utcnow()
    if (count := await store.count_active(request.app[STORE], user.id)) >= ACTIVE_MAX:
        raise _over_cap(count)  # before the costly checks; the transaction checks again
    # Checking the interval walks up to 500 occurrences (up to ~0.15 s for a rare schedule):
    # in a worker thread, one such piece of work at a time per process.
    upcoming = request.app[UPCOMING]
    schedule, text, runs = await upcoming.off_loop(_checked, body, request.app[CONFIG], now)
    key = (schedule.expr, schedule.timezone)
    reminder = Reminder(
        id=uuid7(), owner_id=user.id, cron=schedule.expr, timezone=schedule.timezone,
        text=text, created_at=now,
    )  # fmt: skip
    async with request.app[STORE].transaction() as tx:
        count = await store.count_active(tx, user.id)
        if count >= ACTIVE_MAX:
            raise _over_cap(count)
        await store.insert_reminder(tx, reminder)
        await next_runs.save(tx, reminder.id, to_stored(key, runs))
        await tx.append(
            ReminderCreated(
                reminder_id=reminder.id, owner_id=user.id, cron=reminder.cron,
                timezone=reminder.timezone, text=text, occurred_at=now,
                trace_id=request[TRACE_ID],
            )
        )  # fmt: skip
    upcoming.remember(key, runs)
    out = _out(reminder, runs.next_runs(now) or [])
    return json_response(out, 201, headers={"Location": f"/v1/reminders/{reminder.id}"})


async def list_reminders(request: web.Request) -> web.Response:
    """The caller's reminders that are not deleted, newest first, each with its next runs
    (none while it is paused: it does not fire)."""
    user = await require_user(request)
    now = utcnow()
    mine = await store.active_of(request.app[STORE], user.id)
    # Stored or cached, computed off the loop when neither holds (sluice.scheduler.upcoming).
    firing = {r.id: (r.cron, r.timezone) for r in mine if not r.paused_at}
    runs = await request.app[UPCOMING].of(request.app[STORE], firing, now)
    return json_response(ReminderList(items=[_out(r, runs.get(r.id, [])) for r in mine]))


async def delete_reminder(request: web.Request) -> web.Response:
    """Set ``deleted_at`` and append ``ReminderDeleted``; 404 unknown, another's or deleted."""
    user = await require_user(request)
    reminder_id = request.match_info["id"]
    async with request.app[STORE].transaction() as tx:
        if not await store.mark_deleted(tx, reminder_id, user.id, utcnow()):
            raise NotFound(f"you have no reminder {reminder_id!r}")
        await tx.append(
            ReminderDeleted(reminder_id=reminder_id, owner_id=user.id, trace_id=request[TRACE_ID])
        )
    return web.Response(status=204)


ROUTES = (
    Route("POST", "/v1/reminders", create_reminder, {
        "operationId": "createReminder",
        "summary": "A cron reminder: one e-mail to you at each occurrence",
        "description": (
            "`cron`: six fields, seconds first (`sec min hour dom mon dow`), with ranges, "
            "steps, lists, three-letter month and day names, day of week 0-7 (0 and 7 are "
            "Sunday); Quartz tokens (`?`, `L`, `W`, `#`) and a seventh field are refused. "
            "`timezone`: an IANA zone the cron is read in. Occurrences must be at least "
            "SLUICE_REMINDER_MIN_INTERVAL seconds apart (default 60). `text`: 1 to "
            f"{REMINDER_TEXT_MAX} characters, not blank. At most {ACTIVE_MAX} active reminders "
            "per user. `next_runs` are the next three occurrences, in UTC. Occurrences are "
            "mailed only once the address is verified, and within the user's mail budget "
            "(SLUICE_MAIL_USER_HOURLY, SLUICE_MAIL_USER_DAILY)."
        ),
        "security": USER,
        "requestBody": request_body(ReminderBody),
        "responses": {
            "201": ok(ReminderOut, "the new reminder"),
            **BAD_BODY,
            "401": UNAUTHORIZED,
            "422": problem("bad cron (the reason named), unknown time zone, occurrences "
                           "closer than the minimum interval, blank or too long text, or "
                           f"{ACTIVE_MAX} active reminders already"),
        },
    }, structs=(ReminderBody, ReminderOut)),
    Route("GET", "/v1/reminders", list_reminders, {
        "operationId": "listReminders",
        "summary": "The caller's reminders that are not deleted, newest first",
        "description": (
            "`status` is `paused` for a reminder paused by its mails' one-click "
            "unsubscribe: it does not fire, and its `next_runs` is empty."
        ),
        "security": USER,
        "responses": {"200": ok(ReminderList, "each with its next three occurrences"),
                      "401": UNAUTHORIZED},
    }, structs=(ReminderList,)),
    Route("DELETE", "/v1/reminders/{id}", delete_reminder, {
        "operationId": "deleteReminder",
        "summary": "Delete a reminder: no occurrence fires after the deletion committed",
        "security": USER,
        "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
        ],
        "responses": {
            "204": {"description": "deleted"},
            "401": UNAUTHORIZED,
            "404": problem("no such reminder, another user's, or deleted already"),
        },
    }),
)  # fmt: skip
