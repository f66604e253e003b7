"""The caller's reminders: create (a validated cron, or a one-shot's instant), list, delete.

A reminder and its ``ReminderCreated`` (or its deletion and
``ReminderDeleted``) commit in one transaction; every scheduler replica
follows those events, and checks the reminder in the database again before
each occurrence fires.
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from sluice.app import (
    BAD_BODY,
    UNAUTHORIZED,
    USER,
    Config,
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    config,
    json_response,
    ok,
    problem,
    read_json,
    request_body,
    require_user,
    store,
    trace_id,
    utcnow,
    uuid7,
)
from sluice.app.advanced import CronSchedule
from sluice.builtin.reminders import next_runs, stored
from sluice.builtin.reminders.events import ReminderCreated, ReminderDeleted
from sluice.builtin.reminders.http.keys import UPCOMING
from sluice.builtin.reminders.http.reminder_checks import (
    check_at,
    check_cron,
    check_text,
    check_timezone,
    one_shot_runs,
    reminder_out,
)
from sluice.builtin.reminders.http.schemas import (
    REMINDER_TEXT_MAX,
    ReminderBody,
    ReminderList,
    ReminderOut,
)
from sluice.builtin.reminders.stored import Reminder
from sluice.builtin.reminders.upcoming import Window, to_stored, window

ACTIVE_MAX = 100  # cron reminders per user (paused ones count, deleted ones do not)
PENDING_MAX = 1000  # one-shots per user that have not fired yet
_SHAPES = "a one-shot reminder takes {at, text}, a cron reminder {cron, timezone, text}"


def _validated(body: ReminderBody, config: Config, now: datetime) -> tuple[CronSchedule, str]:
    """The schedule (in the reminder's zone) and the text, or a 422 naming every bad field."""
    errors: list[FieldError] = []
    timezone = check_timezone(body.timezone, errors)
    schedule = check_cron(body.cron, timezone, config, now, errors)
    text = check_text(body.text, errors)
    if errors or schedule is None or timezone is None or text is None:
        raise Unprocessable("invalid reminder", errors)
    return schedule, text


def _checked(body: ReminderBody, config: Config, now: datetime) -> tuple[CronSchedule, str, Window]:
    """The checks, then the reminder's next runs (``sluice.builtin.reminders.upcoming``): CPU
    work."""
    schedule, text = _validated(body, config, now)
    return schedule, text, window(schedule, now)


def _over_cap(count: int) -> Unprocessable:
    message = f"you have {count} active reminders, the most allowed is {ACTIVE_MAX}; delete one"
    return Unprocessable("too many reminders", [FieldError("reminders", message)])


def _over_pending(count: int) -> Unprocessable:
    message = (
        f"you have {count} one-shot reminders still to fire, the most allowed is "
        f"{PENDING_MAX}; delete one or wait for one to fire"
    )
    return Unprocessable("too many reminders", [FieldError("reminders", message)])


async def _create_one_shot(request: web.Request, user_id: str, body: ReminderBody) -> web.Response:
    """``{at, text}``: fires once, from the store's due index (``sluice.scheduler.one_shots``)."""
    now = utcnow()
    errors: list[FieldError] = []
    for name in ("cron", "timezone"):
        if getattr(body, name) is not None:
            errors.append(FieldError(name, _SHAPES))
    at = check_at(body.at, now, errors)
    text = check_text(body.text, errors)
    if errors or at is None or text is None:
        raise Unprocessable("invalid reminder", errors)
    reminder = Reminder(
        id=uuid7(), owner_id=user_id, cron="", timezone="", text=text, created_at=now, at=at
    )
    async with store(request).transaction() as tx:
        if (count := await stored.count_pending(tx, user_id)) >= PENDING_MAX:
            raise _over_pending(count)
        await stored.insert_reminder(tx, reminder)
        await tx.append(
            ReminderCreated(
                reminder_id=reminder.id,
                owner_id=user_id,
                cron="",
                timezone="",
                text=text,
                at=at,
                occurred_at=now,
                trace_id=trace_id(request),
            )
        )
    out = reminder_out(reminder, one_shot_runs(reminder))
    return json_response(out, 201, headers={"Location": f"/v1/reminders/{reminder.id}"})


async def create_reminder(request: web.Request) -> web.Response:
    """A new reminder and ``ReminderCreated`` in one transaction; 201 with its next runs."""
    user = await require_user(request)
    body = await read_json(request, ReminderBody)
    if body.at is not None:
        return await _create_one_shot(request, user.id, body)
    now = utcnow()
    if (count := await stored.count_active(store(request), user.id)) >= ACTIVE_MAX:
        raise _over_cap(count)  # before the costly checks; the transaction checks again
    # Checking the interval walks up to 500 occurrences (up to ~0.15 s for a rare schedule):
    # in a worker thread, one such piece of work at a time per process.
    upcoming = request.app[UPCOMING]
    schedule, text, runs = await upcoming.off_loop(_checked, body, config(request), now)
    key = (schedule.expr, schedule.timezone)
    reminder = Reminder(
        id=uuid7(),
        owner_id=user.id,
        cron=schedule.expr,
        timezone=schedule.timezone,
        text=text,
        created_at=now,
    )
    async with store(request).transaction() as tx:
        count = await stored.count_active(tx, user.id)
        if count >= ACTIVE_MAX:
            raise _over_cap(count)
        await stored.insert_reminder(tx, reminder)
        await next_runs.save(tx, reminder.id, to_stored(key, runs))
        await tx.append(
            ReminderCreated(
                reminder_id=reminder.id,
                owner_id=user.id,
                cron=reminder.cron,
                timezone=reminder.timezone,
                text=text,
                occurred_at=now,
                trace_id=trace_id(request),
            )
        )
    upcoming.remember(key, runs)
    out = reminder_out(reminder, runs.next_runs(now) or [])
    return json_response(out, 201, headers={"Location": f"/v1/reminders/{reminder.id}"})


async def list_reminders(request: web.Request) -> web.Response:
    """The caller's reminders that are not deleted, newest first, each with its next runs
    (none while it is paused: it does not fire)."""
    user = await require_user(request)
    now = utcnow()
    mine = await stored.active_of(store(request), user.id)
    # Stored or cached, computed off the loop when neither holds
    # (sluice.builtin.reminders.upcoming).
    firing = {r.id: (r.cron, r.timezone) for r in mine if not r.paused_at and not r.one_shot}
    runs = await request.app[UPCOMING].of(store(request), firing, now)
    items = [reminder_out(r, one_shot_runs(r) if r.one_shot else runs.get(r.id, [])) for r in mine]
    return json_response(ReminderList(items=items))


async def delete_reminder(request: web.Request) -> web.Response:
    """Set ``deleted_at`` and append ``ReminderDeleted``; 404 unknown, another's or deleted."""
    user = await require_user(request)
    reminder_id = request.match_info["id"]
    async with store(request).transaction() as tx:
        if not await stored.mark_deleted(tx, reminder_id, user.id, utcnow()):
            raise NotFound(f"you have no reminder {reminder_id!r}")
        await tx.append(
            ReminderDeleted(reminder_id=reminder_id, owner_id=user.id, trace_id=trace_id(request))
        )
    return web.Response(status=204)


ROUTES = (
    Route(
        "POST",
        "/v1/reminders",
        create_reminder,
        {
            "operationId": "createReminder",
            "summary": "A reminder: one e-mail to you at each occurrence, or once at `at`",
            "description": (
                "Either `{cron, timezone, text}` (a cron reminder) or `{at, text}` (a one-shot), "
                "not both. `at`: an RFC 3339 instant with an offset, in the future and at most "
                "365 days ahead; the one-shot fires once, within a second of it, then reads "
                f"`status: done`; at most {PENDING_MAX} one-shots not fired yet per user. "
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
                "422": problem(
                    "bad cron (the reason named), unknown time zone, occurrences "
                    "closer than the minimum interval, blank or too long text, "
                    "`at` not an instant with an offset, past or over a year ahead, "
                    "`at` with `cron` or `timezone`, or "
                    f"{ACTIVE_MAX} active (or {PENDING_MAX} pending one-shot) "
                    "reminders already"
                ),
            },
        },
        structs=(ReminderBody, ReminderOut),
    ),
    Route(
        "GET",
        "/v1/reminders",
        list_reminders,
        {
            "operationId": "listReminders",
            "summary": "The caller's reminders that are not deleted, newest first",
            "description": (
                "`status` is `paused` for a reminder paused by a PATCH or its mails' "
                "one-click unsubscribe: it does not fire, and its `next_runs` is empty; "
                "`done` for a one-shot that fired. A one-shot has `at` (and `cron`, `timezone` "
                "null), its `next_runs` is `[at]` while it will fire. Every reminder not done "
                f"is listed, and the newest {stored.DONE_LISTED} done one-shots."
            ),
            "security": USER,
            "responses": {
                "200": ok(ReminderList, "each with its next three occurrences"),
                "401": UNAUTHORIZED,
            },
        },
        structs=(ReminderList,),
    ),
    Route(
        "DELETE",
        "/v1/reminders/{id}",
        delete_reminder,
        {
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
        },
    ),
)
