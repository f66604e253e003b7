"""The ``mail`` handler group: the welcome mail once per registered user (with the link
that verifies the address), new verification links asked for, and one mail per
reminder occurrence.

Each handler renders a template and hands the mail to ``Mailer.send_once``,
which does the rest (idempotency key, the user's budget, rate limit, transport,
outcomes). Nothing but the welcome mail and verification links goes to an
address that is not verified: a reminder occurrence of an unverified owner (or
of a reminder paused meanwhile) is recorded by the scheduler as usual, and its
mail is withheld here, logged and counted (``sluice_mails_withheld_total``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from sluice.builtin.accounts.mail import links, templates
from sluice.builtin.accounts.mail.budget import UserBudget
from sluice.builtin.accounts.mail.idempotency import SendLog
from sluice.builtin.accounts.mail.ratelimit import RateLimiter
from sluice.builtin.accounts.mail.sending import (
    Mailer,
    Outgoing,
    reminder_key,
    verification_key,
    welcome_key,
)
from sluice.builtin.accounts.mail.transport import make_transport
from sluice.builtin.reminders.stored import mail_target
from sluice.events import Event, ReminderDue, UserRegistered, VerificationRequested, utcnow
from sluice.metrics import MAILS_WITHHELD
from sluice.resources import Resources
from sluice.store import Store
from sluice.store.users import user_by_id
from sluice.streams.dispatch import EventHandler, event_group
from sluice.streams.messages import Duplicate
from sluice.streams.spec import GroupSpec

log = structlog.get_logger(__name__)

NAME = "mail"


@dataclass(frozen=True)
class MailDeps:
    mailer: Mailer
    base_url: str
    store: Store
    link_key: links.LinkKey


async def _send(deps: MailDeps, outgoing: Outgoing) -> None:
    """Send ``outgoing`` once; ``Duplicate`` when it was sent before (the delivery is
    recorded as a duplicate), nothing when it was withheld (the user's budget)."""
    if not await deps.mailer.send_once(outgoing) and await deps.mailer.sends.is_sent(outgoing.key):
        raise Duplicate(f"mail {outgoing.key} was sent before")


async def _verify_url(deps: MailDeps, user_id: str, email: str) -> str:
    token = links.verify_token(
        await deps.link_key.get(), user_id, email, utcnow() + links.VERIFY_TTL
    )
    return links.link(deps.base_url, links.VERIFY_PATH, token)


async def on_user_registered(event: UserRegistered, deps: MailDeps) -> None:
    url = await _verify_url(deps, event.user_id, event.email)
    await _send(
        deps,
        Outgoing(
            key=welcome_key(event.user_id),
            recipient=event.email,
            recipient_name=event.name,
            content=templates.welcome(event.name, deps.base_url, url),
            user_id=event.user_id,
        ),
    )


async def on_verification_requested(event: VerificationRequested, deps: MailDeps) -> None:
    """A new link to the address the user has now, unless it was verified meanwhile."""
    user = await user_by_id(deps.store, event.user_id)
    if user is None or user.verified_at is not None:
        log.info("verification mail not needed", user_id=event.user_id,
                 verified=user is not None)  # fmt: skip
        return
    url = await _verify_url(deps, user.id, user.email)
    await _send(
        deps,
        Outgoing(
            key=verification_key(event.event_id),
            recipient=user.email,
            recipient_name=user.name,
            content=templates.verification(user.name, url),
            user_id=user.id,
        ),
    )


def _withheld(reason: str, message: str, event: ReminderDue) -> None:
    MAILS_WITHHELD.labels(reason).inc()
    log.info(
        message, reminder_id=event.reminder_id, owner_id=event.owner_id,
        slot=event.scheduled_for.isoformat(), reason=reason,
    )  # fmt: skip


async def on_reminder_due(event: ReminderDue, deps: MailDeps) -> None:
    """One mail per occurrence, keyed by reminder and slot, to the owner's address as stored
    now (never one an entry names), only when it is verified and the reminder not paused."""
    target = await mail_target(deps.store, event.reminder_id)
    if target is None:
        log.warning(
            "reminder or its owner is gone, no mail", reminder_id=event.reminder_id,
            owner_id=event.owner_id,
        )  # fmt: skip
        return
    if not target.verified:
        _withheld("unverified", "reminder not mailed: the owner's address is not verified", event)
        return
    if target.paused:
        _withheld("paused", "reminder not mailed: the reminder is paused", event)
        return
    token = links.unsubscribe_token(await deps.link_key.get(), event.reminder_id)
    unsubscribe = links.link(deps.base_url, links.UNSUBSCRIBE_PATH, token)
    await _send(
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


HANDLERS: Mapping[type[Event], EventHandler] = {
    UserRegistered: on_user_registered,
    VerificationRequested: on_verification_requested,
    ReminderDue: on_reminder_due,
}


def build_deps(resources: Resources) -> MailDeps:
    """Transport from the config (an invalid ``SLUICE_SMTP_URL`` fails here, at start)."""
    config = resources.config
    transport = make_transport(config)
    limiter = RateLimiter(resources.redis, resources.keys.mail_rate(), config.mail_rate)
    budget = UserBudget(
        resources.redis, resources.keys.mail_budget, config.mail_user_hourly,
        config.mail_user_daily,
    )  # fmt: skip
    mailer = Mailer(SendLog(resources.store), limiter, transport, config.mail_from, budget)
    log.info(
        "mail: ready", transport=transport.name, target=transport.describe(),
        rate_per_second=config.mail_rate, user_hourly=config.mail_user_hourly,
        user_daily=config.mail_user_daily,
    )  # fmt: skip
    return MailDeps(
        mailer=mailer, base_url=config.base_url, store=resources.store,
        link_key=links.LinkKey(resources.store),
    )  # fmt: skip


def group(resources: Resources, deps: MailDeps | None = None) -> GroupSpec:
    aggregates = tuple(sorted({event_type.aggregate for event_type in HANDLERS}))
    return event_group(
        NAME, aggregates, HANDLERS, deps or build_deps(resources),
        resources.config.worker_concurrency,
    )  # fmt: skip
