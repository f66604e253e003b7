"""The ``mail`` handler group: the welcome mail once per registered user, and one
mail per reminder occurrence.

Each handler renders a template and hands the mail to ``Mailer.send_once``,
which does the rest (idempotency key, rate limit, transport, outcomes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from sluice.events import Event, ReminderDue, UserRegistered
from sluice.mail import templates
from sluice.mail.idempotency import SendLog
from sluice.mail.ratelimit import RateLimiter
from sluice.mail.sending import Mailer, Outgoing, reminder_key, welcome_key
from sluice.mail.transport import make_transport
from sluice.resources import Resources
from sluice.store import Store
from sluice.store.users import user_by_id
from sluice.streams.dispatch import EventHandler, event_group
from sluice.streams.spec import GroupSpec

log = structlog.get_logger(__name__)

NAME = "mail"


@dataclass(frozen=True)
class MailDeps:
    mailer: Mailer
    base_url: str
    store: Store


async def on_user_registered(event: UserRegistered, deps: MailDeps) -> None:
    await deps.mailer.send_once(
        Outgoing(
            key=welcome_key(event.user_id),
            recipient=event.email,
            recipient_name=event.name,
            content=templates.welcome(event.name, deps.base_url),
        )
    )


async def on_reminder_due(event: ReminderDue, deps: MailDeps) -> None:
    """One mail per occurrence, to the owner; keyed by reminder and slot."""
    email, name = event.email, event.name
    if not email:  # an event from before the scheduler filled the recipient in
        owner = await user_by_id(deps.store, event.owner_id)
        if owner is None:
            log.warning(
                "reminder owner is gone, no mail", reminder_id=event.reminder_id,
                owner_id=event.owner_id,
            )  # fmt: skip
            return
        email, name = owner.email, owner.name
    await deps.mailer.send_once(
        Outgoing(
            key=reminder_key(event.reminder_id, event.scheduled_for),
            recipient=email,
            recipient_name=name,
            content=templates.reminder(event.text, event.scheduled_for, event.timezone),
        )
    )


HANDLERS: Mapping[type[Event], EventHandler] = {
    UserRegistered: on_user_registered,
    ReminderDue: on_reminder_due,
}


def build_deps(resources: Resources) -> MailDeps:
    """Transport from the config (an invalid ``SLUICE_SMTP_URL`` fails here, at start)."""
    config = resources.config
    transport = make_transport(config)
    limiter = RateLimiter(resources.redis, resources.keys.mail_rate(), config.mail_rate)
    mailer = Mailer(SendLog(resources.store), limiter, transport, config.mail_from)
    log.info(
        "mail: ready", transport=transport.name, target=transport.describe(),
        rate_per_second=config.mail_rate,
    )  # fmt: skip
    return MailDeps(mailer=mailer, base_url=config.base_url, store=resources.store)


def group(resources: Resources, deps: MailDeps | None = None) -> GroupSpec:
    aggregates = tuple(sorted({event_type.aggregate for event_type in HANDLERS}))
    return event_group(
        NAME, aggregates, HANDLERS, deps or build_deps(resources),
        resources.config.worker_concurrency,
    )  # fmt: skip
