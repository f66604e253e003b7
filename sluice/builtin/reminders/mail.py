"""The reminders app's mail: one per reminder occurrence, sent through the accounts app's
``mail`` group (``@mail_group.on``, the group the accounts app exports), with a one-click
unsubscribe link (RFC 8058) that pauses the reminder.

Nothing goes to an address that is not verified: a reminder occurrence of an unverified
owner (or of a reminder paused meanwhile) is recorded by the scheduler as usual, and its
mail is withheld here, logged and counted (``sluice_mails_withheld_total``).
"""

from __future__ import annotations

import structlog

from sluice.builtin.accounts import mail_group
from sluice.builtin.accounts.mail import links, templates
from sluice.builtin.accounts.mail.group import Context, send
from sluice.builtin.accounts.mail.sending import Outgoing, reminder_key
from sluice.builtin.accounts.metrics import MAILS_WITHHELD
from sluice.builtin.reminders.events import ReminderDue
from sluice.builtin.reminders.stored import mail_target

log = structlog.get_logger(__name__)


def _withheld(reason: str, message: str, event: ReminderDue) -> None:
    MAILS_WITHHELD.labels(reason).inc()
    log.info(
        message,
        reminder_id=event.reminder_id,
        owner_id=event.owner_id,
        slot=event.scheduled_for.isoformat(),
        reason=reason,
    )


@mail_group.on(ReminderDue)
async def on_reminder_due(event: ReminderDue, ctx: Context) -> None:
    """One mail per occurrence, keyed by reminder and slot, to the owner's address as stored
    now (never one an entry names), only when it is verified and the reminder not paused."""
    deps = ctx.deps
    target = await mail_target(deps.store, event.reminder_id)
    if target is None:
        log.warning(
            "reminder or its owner is gone, no mail",
            reminder_id=event.reminder_id,
            owner_id=event.owner_id,
        )
        return
    if not target.verified:
        _withheld("unverified", "reminder not mailed: the owner's address is not verified", event)
        return
    if target.paused:
        _withheld("paused", "reminder not mailed: the reminder is paused", event)
        return
    token = links.unsubscribe_token(await deps.link_key.get(), event.reminder_id)
    unsubscribe = links.link(deps.base_url, links.UNSUBSCRIBE_PATH, token)
    await send(
        deps,
        Outgoing(
            key=reminder_key(event.reminder_id, event.scheduled_for),
            recipient=target.email,
            recipient_name=target.name,
            content=templates.reminder(
                event.text, event.scheduled_for, event.timezone, unsubscribe
            ),
            user_id=target.owner_id,
            # RFC 2369 and RFC 8058: a POST of List-Unsubscribe=One-Click to the URL pauses
            # the reminder, without a sign-in.
            headers=(
                ("List-Unsubscribe", f"<{unsubscribe}>"),
                ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click"),
            ),
        ),
    )
