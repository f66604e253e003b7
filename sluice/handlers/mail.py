"""The ``mail`` handler group: the welcome mail, exactly once per registered user.

Each handler renders a template and hands the mail to ``Mailer.send_once``,
which does the rest (idempotency key, rate limit, transport, outcomes). A
reminder handler will be one more function here, keyed
``sluice.mail.sending.reminder_key`` and rendered with
``sluice.mail.templates.reminder``, and one more entry in ``HANDLERS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from sluice.events import Event, UserRegistered
from sluice.mail import templates
from sluice.mail.idempotency import SendLog
from sluice.mail.ratelimit import RateLimiter
from sluice.mail.sending import Mailer, Outgoing, welcome_key
from sluice.mail.transport import make_transport
from sluice.resources import Resources
from sluice.streams.dispatch import EventHandler, event_group
from sluice.streams.spec import GroupSpec

log = structlog.get_logger(__name__)

NAME = "mail"


@dataclass(frozen=True)
class MailDeps:
    mailer: Mailer
    base_url: str


async def on_user_registered(event: UserRegistered, deps: MailDeps) -> None:
    await deps.mailer.send_once(
        Outgoing(
            key=welcome_key(event.user_id),
            recipient=event.email,
            recipient_name=event.name,
            content=templates.welcome(event.name, deps.base_url),
        )
    )


HANDLERS: Mapping[type[Event], EventHandler] = {UserRegistered: on_user_registered}


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
    return MailDeps(mailer=mailer, base_url=config.base_url)


def group(resources: Resources, deps: MailDeps | None = None) -> GroupSpec:
    aggregates = tuple(sorted({event_type.aggregate for event_type in HANDLERS}))
    return event_group(
        NAME, aggregates, HANDLERS, deps or build_deps(resources),
        resources.config.worker_concurrency,
    )  # fmt: skip
