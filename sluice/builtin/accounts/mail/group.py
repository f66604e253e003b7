"""The ``mail`` handler group: the welcome mail once per registered user (with the link
that verifies the address), new verification links asked for, and what other apps
add (``mail_group.on``: the reminders app's one mail per reminder occurrence).

Each handler renders a template and hands the mail to ``Mailer.send_once``,
which does the rest (idempotency key, the user's budget, rate limit, transport,
outcomes). Nothing but the welcome mail and verification links goes to an
address that is not verified: a reminder occurrence of an unverified owner (or
of a reminder paused meanwhile) is recorded by the scheduler as usual, and its
mail is withheld here, logged and counted (``sluice_mails_withheld_total``).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from sluice.app import Duplicate, HandlerContext, Resources, Store, user_by_id, utcnow
from sluice.builtin.accounts.app import app
from sluice.builtin.accounts.events import UserRegistered, VerificationRequested
from sluice.builtin.accounts.keys import AccountsKeys
from sluice.builtin.accounts.mail import links, templates
from sluice.builtin.accounts.mail.budget import UserBudget
from sluice.builtin.accounts.mail.idempotency import SendLog
from sluice.builtin.accounts.mail.ratelimit import DomainRate, RateLimiter
from sluice.builtin.accounts.mail.sending import (
    Mailer,
    Outgoing,
    verification_key,
    welcome_key,
)
from sluice.builtin.accounts.mail.transport import make_transport
from sluice.builtin.accounts.settings import AccountsSettings

log = structlog.get_logger(__name__)

NAME = "mail"


@dataclass(frozen=True)
class MailDeps:
    mailer: Mailer
    base_url: str
    store: Store
    link_key: links.LinkKey


async def send(deps: MailDeps, outgoing: Outgoing) -> None:
    """Send ``outgoing`` once; ``Duplicate`` when it was sent before (the delivery is
    recorded as a duplicate), nothing when it was withheld (the user's budget)."""
    if not await deps.mailer.send_once(outgoing) and await deps.mailer.sends.is_sent(outgoing.key):
        raise Duplicate(f"mail {outgoing.key} was sent before")


def build_deps(resources: Resources) -> MailDeps:
    """Transport from the config (an invalid ``SLUICE_SMTP_URL`` fails here, at start)."""
    mail = AccountsSettings.of(resources)
    transport = make_transport(resources.config)
    keys = AccountsKeys(resources.keys.prefix)
    limiter = RateLimiter(resources.redis, keys.mail_rate(), mail.mail_rate)
    budget = UserBudget(
        resources.redis,
        keys.mail_budget,
        mail.mail_user_hourly,
        mail.mail_user_daily,
    )
    rate = mail.domain_rate()
    domains = None if rate is None else DomainRate(resources.redis, keys.mail_domain_rate, rate)
    mailer = Mailer(SendLog(resources.store), limiter, transport, mail.mail_from, budget, domains)
    log.info(
        "mail: ready",
        transport=transport.name,
        target=transport.describe(),
        rate_per_second=mail.mail_rate,
        user_hourly=mail.mail_user_hourly,
        user_daily=mail.mail_user_daily,
        domain_rate=mail.mail_domain_rate or None,
    )
    return MailDeps(
        mailer=mailer,
        base_url=resources.config.base_url,
        store=resources.store,
        link_key=links.LinkKey(resources.store),
    )


# The group, which other apps join with ``@mail_group.on(EventType)``: ``async def
# handler(event, ctx)``, ``ctx.deps`` a ``MailDeps`` (the mailer, the signed-link key).
# The reminders app, which requires this one, mails each occurrence through it.
mail_group = app.group(NAME, deps=build_deps)
Context = HandlerContext[MailDeps]


async def _verify_url(deps: MailDeps, user_id: str, email: str) -> str:
    token = links.verify_token(
        await deps.link_key.get(), user_id, email, utcnow() + links.VERIFY_TTL
    )
    return links.link(deps.base_url, links.VERIFY_PATH, token)


@mail_group.on(UserRegistered)
async def on_user_registered(event: UserRegistered, ctx: Context) -> None:
    deps = ctx.deps
    url = await _verify_url(deps, event.user_id, event.email)
    await send(
        deps,
        Outgoing(
            key=welcome_key(event.user_id),
            recipient=event.email,
            recipient_name=event.name,
            content=templates.welcome(event.name, deps.base_url, url),
            user_id=event.user_id,
        ),
    )


@mail_group.on(VerificationRequested)
async def on_verification_requested(event: VerificationRequested, ctx: Context) -> None:
    """A new link to the address the user has now, unless it was verified meanwhile."""
    deps = ctx.deps
    user = await user_by_id(deps.store, event.user_id)
    if user is None or user.verified_at is not None:
        log.info("verification mail not needed", user_id=event.user_id, verified=user is not None)
        return
    url = await _verify_url(deps, user.id, user.email)
    await send(
        deps,
        Outgoing(
            key=verification_key(event.event_id),
            recipient=user.email,
            recipient_name=user.name,
            content=templates.verification(user.name, url),
            user_id=user.id,
        ),
    )
