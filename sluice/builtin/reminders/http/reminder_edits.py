"""One of the caller's reminders: read it, change it (docs/guides/tasks.md ``PATCH``).

A PATCH validates what it changes as ``POST`` does, then stores the new state
and appends ``ReminderUpdated`` (the whole new state) in one transaction, the
row locked from its read: every scheduler replica drops its plan when the
event reaches it and reloads the reminder from the database (within about a
second of the relay publishing it), the path a pause by unsubscribe takes.

What the database orders, and why nothing of the old schedule fires after:
an occurrence's firing transaction reads the reminder under a lock too
(``sluice.builtin.reminders.stored.fire``). One that committed before the PATCH has
fired, once; one after it finds the schedule it was planned from gone (a
different cron or zone, or a slot not after ``rescheduled_at``) and fires
nothing. A changed schedule (or a resume) starts after the PATCH: no
occurrence of it from before fires, catch-up or not. A one-shot moved by
``at`` is the same row: the scheduler's claim (``sluice.builtin.reminders.one_shots``)
and the PATCH are ordered by it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from sluice.app import (
    BAD_BODY,
    UNAUTHORIZED,
    USER,
    Config,
    Conflict,
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
)
from sluice.builtin.reminders import next_runs, stored
from sluice.builtin.reminders.events import ReminderUpdated
from sluice.builtin.reminders.http.keys import UPCOMING
from sluice.builtin.reminders.http.reminder_checks import (
    check_at,
    check_cron,
    check_text,
    check_timezone,
    one_shot_runs,
    reminder_out,
)
from sluice.builtin.reminders.http.schemas import ReminderOut, ReminderPatch
from sluice.builtin.reminders.stored import Reminder
from sluice.builtin.reminders.upcoming import Window, to_stored, window

_FIELDS = frozenset(ReminderPatch.__struct_fields__)
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_NOT_YOURS = "you have no reminder {!r}"


def _not_found(reminder_id: str) -> NotFound:
    return NotFound(_NOT_YOURS.format(reminder_id))


async def get_reminder(request: web.Request) -> web.Response:
    """The caller's reminder with its next runs; 404 unknown, another's or deleted."""
    user = await require_user(request)
    reminder_id = request.match_info["id"]
    found = await stored.find(store(request), reminder_id)
    if found is None or found[1] or found[0].owner_id != user.id:
        raise _not_found(reminder_id)
    return json_response(await _answer(request, found[0], utcnow()))


async def _answer(request: web.Request, reminder: Reminder, now: datetime) -> ReminderOut:
    if reminder.one_shot:
        return reminder_out(reminder, one_shot_runs(reminder))
    if reminder.paused_at is not None:
        return reminder_out(reminder, [])
    runs = await request.app[UPCOMING].of(
        store(request), {reminder.id: (reminder.cron, reminder.timezone)}, now
    )
    return reminder_out(reminder, runs.get(reminder.id, []))


async def _read_patch(request: web.Request) -> ReminderPatch:
    """The fields to change: 422 for none or an unknown one, 400 for a wrong JSON type."""
    patch = await read_json(request, ReminderPatch, optional=True)
    raw = await request.read()  # kept by aiohttp: valid JSON, an object, once decoded above
    fields: dict[str, Any] = msgspec.json.decode(raw) if raw.strip() else {}
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise Unprocessable(
            "unknown reminder fields",
            [
                FieldError(name, f"not a field of a reminder ({', '.join(sorted(_FIELDS))})")
                for name in unknown
            ],
        )
    if all(getattr(patch, name) is None for name in _FIELDS):
        raise Unprocessable(
            "nothing to change",
            [
                FieldError(
                    "body",
                    "name at least one of cron, timezone, text, paused (a one-shot: at)",
                )
            ],
        )
    return patch


def _one_shot_changes(
    patch: ReminderPatch, now: datetime, changes: dict[str, Any], errors: list[FieldError]
) -> None:
    for name in ("cron", "timezone"):
        if getattr(patch, name) is not None:
            errors.append(FieldError(name, "a one-shot reminder has no cron schedule"))
    if patch.at is not None and (at := check_at(patch.at, now, errors)) is not None:
        changes["at"] = at


def _cron_changes(
    current: Reminder,
    patch: ReminderPatch,
    config: Config,
    now: datetime,
    changes: dict[str, Any],
    errors: list[FieldError],
) -> Window | None:
    """A new schedule's changes and its window (walks the cron); None when unchanged."""
    if patch.at is not None:
        errors.append(FieldError("at", "a cron reminder has no instant; create a one-shot"))
    if patch.cron is None and patch.timezone is None:
        return None
    timezone = current.timezone
    if patch.timezone is not None:
        timezone = check_timezone(patch.timezone, errors) or current.timezone
    cron = current.cron if patch.cron is None else patch.cron
    schedule = check_cron(cron, timezone, config, now, errors)
    if schedule is None or (schedule.expr, schedule.timezone) == (current.cron, current.timezone):
        return None
    changes |= {"cron": schedule.expr, "timezone": schedule.timezone, "rescheduled_at": now}
    return window(schedule, now)


def _edited(
    current: Reminder, patch: ReminderPatch, config: Config, now: datetime
) -> tuple[Reminder, Window | None]:
    """The new state, and a cron reminder's new window; 422 naming every bad field.
    Walks the cron when the schedule changes: for the worker thread."""
    errors: list[FieldError] = []
    changes: dict[str, Any] = {}
    if patch.text is not None and (text := check_text(patch.text, errors)) is not None:
        changes["text"] = text
    if patch.paused is not None and patch.paused != (current.paused_at is not None):
        changes["paused_at"] = now if patch.paused else None
        if not patch.paused:
            changes["rescheduled_at"] = now  # what fell due while paused does not fire
    found: Window | None = None
    if current.one_shot:
        _one_shot_changes(patch, now, changes, errors)
    else:
        found = _cron_changes(current, patch, config, now, changes, errors)
    if errors:
        raise Unprocessable("invalid reminder", errors)
    return msgspec.structs.replace(current, **changes), found


async def patch_reminder(request: web.Request) -> web.Response:
    """Change the caller's reminder; 200 with its new state and next runs."""
    user = await require_user(request)
    reminder_id = request.match_info["id"]
    patch = await _read_patch(request)
    found = await stored.find(store(request), reminder_id)
    if found is None or found[1] or found[0].owner_id != user.id:
        raise _not_found(reminder_id)
    current = found[0]
    if current.status == "done":
        raise Conflict("this one-shot reminder has fired: it cannot change any more")
    now = utcnow()
    upcoming = request.app[UPCOMING]
    edited, runs = await upcoming.off_loop(_edited, current, patch, config(request), now)
    async with store(request).transaction() as tx:
        locked = await stored.own_for_update(tx, reminder_id, user.id)
        if locked is None:
            raise _not_found(reminder_id)  # deleted meanwhile
        if locked != current:  # fired, or changed by another request, since it was checked
            if locked.status == "done":
                raise Conflict("this one-shot reminder has fired: it cannot change any more")
            raise Conflict("the reminder changed meanwhile; read it and try again")
        await stored.save_edit(tx, edited)
        if runs is not None:
            await next_runs.save(tx, reminder_id, to_stored((edited.cron, edited.timezone), runs))
        await tx.append(
            ReminderUpdated(
                reminder_id=reminder_id,
                owner_id=user.id,
                cron=edited.cron,
                timezone=edited.timezone,
                text=edited.text,
                paused=edited.paused_at is not None,
                at=edited.at,
                occurred_at=now,
                trace_id=trace_id(request),
            )
        )
    if runs is not None:
        upcoming.remember((edited.cron, edited.timezone), runs)
    return json_response(await _answer(request, edited, now))


ROUTES = (
    Route(
        "GET",
        "/v1/reminders/{id}",
        get_reminder,
        {
            "operationId": "getReminder",
            "summary": "One of the caller's reminders, with its next runs and status",
            "security": USER,
            "parameters": [_ID],
            "responses": {
                "200": ok(ReminderOut, "the reminder"),
                "401": UNAUTHORIZED,
                "404": problem("no such reminder, another user's, or deleted"),
            },
        },
        structs=(ReminderOut,),
    ),
    Route(
        "PATCH",
        "/v1/reminders/{id}",
        patch_reminder,
        {
            "operationId": "updateReminder",
            "summary": "Change a reminder: every scheduler follows within 2 s",
            "description": (
                "Any of `cron`, `timezone`, `text`, `paused` for a cron reminder; `text`, `at`, "
                "`paused` for a one-shot not fired yet. Each is checked as on creation. "
                "`paused: true` stops it firing (`status: paused`), `false` resumes it "
                "(`active`): occurrences that fell while it was paused do not fire (a one-shot "
                "whose `at` passed while paused fires at once). An occurrence whose firing "
                "committed before the change has fired, once; none of the old schedule fires "
                "after it, and the new schedule starts after it."
            ),
            "security": USER,
            "parameters": [_ID],
            "requestBody": request_body(ReminderPatch),
            "responses": {
                "200": ok(ReminderOut, "the reminder as changed, with its next runs"),
                **BAD_BODY,
                "401": UNAUTHORIZED,
                "404": problem("no such reminder, another user's, or deleted"),
                "409": problem(
                    "a one-shot that fired already, or a reminder changed by "
                    "another request meanwhile"
                ),
                "422": problem(
                    "no field, an unknown field, or a bad value (the reason named, "
                    "as on creation); `cron`/`timezone` for a one-shot, `at` for a "
                    "cron reminder"
                ),
            },
        },
        structs=(ReminderPatch, ReminderOut),
    ),
)
