"""The one-click unsubscribe of a reminder's mails (RFC 8058): it pauses that reminder.

Every reminder mail carries ``List-Unsubscribe: <…/v1/unsubscribe?token=…>`` and
``List-Unsubscribe-Post: List-Unsubscribe=One-Click``. A mail provider's
unsubscribe button POSTs ``List-Unsubscribe=One-Click`` to that URL, with no
sign-in and no cookie: the signed token is the authority, and it names one
reminder. A person who opens the link (and every mail scanner that follows it)
gets a page whose button sends the same POST; the GET changes nothing.

Pausing sets ``paused_at`` and appends ``ReminderUpdated`` (paused) in one
transaction: every scheduler replica drops the reminder from its plan, and the
firing transaction refuses a paused reminder, so once the POST has answered no
occurrence fires anywhere. A second POST, or one for a deleted reminder,
answers the same page: nothing more will be mailed either way.
"""

from __future__ import annotations

from aiohttp import web

from sluice.app import (
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    html_page,
    problem,
    store,
    token_query,
    trace_id,
    utcnow,
)
from sluice.app.advanced import FORM, Form, page
from sluice.builtin.accounts.http.keys import MAIL_LINK_KEY
from sluice.builtin.accounts.mail.links import BadLink, check_unsubscribe_token
from sluice.builtin.accounts.mail.templates import one_line
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.events import ReminderUpdated

_PAUSED = "This reminder is paused: it sends no more mail."
_DELETED = "This reminder was deleted: it sends no more mail."


async def _reminder_id(request: web.Request) -> str:
    """The reminder the link names; 422 for a link sluice did not make."""
    token = request.query.get("token")
    if not token:
        raise Unprocessable(
            "invalid unsubscribe link", [FieldError("token", "required: the link's token")]
        )
    try:
        return check_unsubscribe_token(await request.app[MAIL_LINK_KEY].get(), token)
    except BadLink:
        raise Unprocessable(
            "invalid unsubscribe link",
            [FieldError("token", "this is not an unsubscribe link sluice sent")],
        ) from None


def _quoted(text: str) -> str:
    return f"“{one_line(text, limit=80)}”"


async def unsubscribe_page(request: web.Request) -> web.Response:
    """What the link does, and a button that does it."""
    found = await stored.find(store(request), await _reminder_id(request))
    if found is None:
        raise NotFound("no such reminder")
    reminder, deleted = found
    if deleted:
        return page("Reminder deleted", _DELETED)
    if reminder.paused_at is not None:
        return page("Reminder paused", _PAUSED, f"Reminder: {_quoted(reminder.text)}")
    return page(
        "Pause this reminder?",
        f"Reminder: {_quoted(reminder.text)}",
        "Pausing it stops its mails.",
        form=Form("Pause this reminder", fields={"List-Unsubscribe": "One-Click"}),
    )


async def unsubscribe(request: web.Request) -> web.Response:
    """Pause the reminder (RFC 8058 one-click POST, or the page's button)."""
    reminder_id = await _reminder_id(request)
    async with store(request).transaction() as tx:
        outcome, reminder = await stored.pause(tx, reminder_id, utcnow())
        if outcome is stored.Paused.NOW and reminder is not None:
            await tx.append(
                ReminderUpdated(
                    reminder_id=reminder.id,
                    owner_id=reminder.owner_id,
                    cron=reminder.cron,
                    timezone=reminder.timezone,
                    text=reminder.text,
                    paused=True,
                    at=reminder.at,
                    trace_id=trace_id(request),
                )
            )
    if reminder is None:
        raise NotFound("no such reminder")
    if outcome is stored.Paused.DELETED:
        return page("Reminder deleted", _DELETED)
    return page("Reminder paused", _PAUSED, f"Reminder: {_quoted(reminder.text)}")


_BAD_LINK = problem("no token, or a token sluice did not sign")
_NO_REMINDER = problem("the link names a reminder that does not exist")
_TOKEN = token_query("the token of the mail's List-Unsubscribe URL")

ROUTES = (
    Route(
        "GET",
        "/v1/unsubscribe",
        unsubscribe_page,
        {
            "operationId": "unsubscribePage",
            "summary": "The page of a reminder mail's unsubscribe link: a button that pauses it",
            "description": "Changes nothing (mail scanners follow links); the button POSTs.",
            "parameters": [_TOKEN],
            "responses": {
                "200": html_page("the page (also for a reminder paused or deleted)"),
                "404": _NO_REMINDER,
                "422": _BAD_LINK,
            },
        },
    ),
    Route(
        "POST",
        "/v1/unsubscribe",
        unsubscribe,
        {
            "operationId": "unsubscribe",
            "summary": "One-click unsubscribe (RFC 8058): pause the reminder, no sign-in",
            "description": (
                "The URL of a reminder mail's `List-Unsubscribe` header, POSTed with "
                "`List-Unsubscribe=One-Click` by a mail provider or the page's button. Once "
                "answered, the reminder fires no more on any scheduler replica; a paused or "
                "deleted reminder answers the same."
            ),
            "parameters": [_TOKEN],
            "requestBody": {
                "required": False,
                "content": {
                    FORM: {
                        "schema": {
                            "type": "object",
                            "properties": {"List-Unsubscribe": {"const": "One-Click"}},
                        }
                    }
                },
            },
            "responses": {
                "200": html_page("the reminder is paused"),
                "404": _NO_REMINDER,
                "422": _BAD_LINK,
            },
        },
    ),
)
