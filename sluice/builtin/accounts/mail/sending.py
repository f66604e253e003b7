"""Send one mail exactly once: compose, check, pace, reserve, send, record.

``Mailer.send_once`` is what every mail handler calls, whatever the template:
the welcome mail today, reminders next. The order matters:

1. compose first: a mail that cannot be written (a malformed address) is a
   permanent error before anything is reserved;
2. skip at once when the key is already ``sent`` (a redelivery costs no
   rate-limit slot);
3. count the mail against its user's budget (``sluice.builtin.accounts.mail.budget``); a mail
   over it is not sent, but logged and counted, and the handler returns (the
   entry is acked: retrying would only deliver it later, and as unwanted);
4. with ``SLUICE_MAIL_DOMAIN_RATE``, a mail over its recipient domain's rate is
   given back to wait (``NotYet``: no delivery spent, its budget kept, nothing
   else of it done), so a burst to one domain is spread at the rate and never
   holds a handler that mail to another domain could use;
5. wait for a slot of the global rate limit *before* reserving, so a lease
   is never spent queueing;
6. reserve the key (``sluice.builtin.accounts.mail.idempotency``), and when another worker
   holds it, wait for that worker's outcome within its lease;
7. send within ``SEND_DEADLINE`` (shorter than the lease), then record
   ``sent`` at once; on a failure release the key and re-raise, and the
   runtime retries (4xx, connection errors) or dead-letters (5xx).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.errors import HeaderParseError
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import Policy
from email.utils import formatdate, parseaddr

import structlog

from sluice.app import HandlerError, NotYet
from sluice.builtin.accounts.mail.budget import Spent, UserBudget
from sluice.builtin.accounts.mail.idempotency import Outcome, Reservation, SendLog
from sluice.builtin.accounts.mail.ratelimit import DomainRate, RateLimiter
from sluice.builtin.accounts.mail.templates import Content, one_line
from sluice.builtin.accounts.mail.transport import Transport
from sluice.builtin.accounts.metrics import MAILS, MAILS_WITHHELD

log = structlog.get_logger(__name__)

SEND_DEADLINE = 60.0  # seconds for one whole SMTP conversation; well inside the lease
BUSY_POLL = 0.05  # first pause before looking again at a key another worker holds

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def welcome_key(user_id: str) -> str:
    return f"welcome_{user_id}"


def verification_key(event_id: str) -> str:
    """One key per new verification link asked for (the event that asked)."""
    return f"verify_{event_id}"


def reminder_key(reminder_id: str, scheduled_for: datetime) -> str:
    """One key per reminder occurrence: the slot in UTC, to the second."""
    return f"reminder_{reminder_id}_{scheduled_for.astimezone(UTC):%Y%m%dT%H%M%SZ}"


@dataclass(frozen=True)
class Outgoing:
    """One mail to send: its idempotency key, its recipient, its rendered content."""

    key: str
    recipient: str
    content: Content
    recipient_name: str | None = None
    user_id: str | None = None  # whose mail budget it counts against
    headers: tuple[tuple[str, str], ...] = ()  # more headers (List-Unsubscribe...)

    def __post_init__(self) -> None:
        if not _KEY.fullmatch(self.key):
            raise HandlerError(f"invalid mail key {self.key!r}", permanent=True)


class Verbatim(str):
    """A header value written as given, on one line (RFC 5322 allows 998 characters).

    The email package folds a long header at 78 characters, and a URL it cannot break
    becomes RFC 2047 encoded words, which ``List-Unsubscribe`` (RFC 2369: a list of
    URLs in angle brackets) must not contain. Printable ASCII only, so nothing can be
    smuggled into the header block.
    """

    name: str

    def __new__(cls, name: str, value: str) -> Verbatim:
        if not (value.isascii() and value.isprintable()) or len(name) + len(value) > 990:
            raise ValueError(f"{name}: not one line of printable ASCII")
        header = super().__new__(cls, value)
        header.name = name
        return header

    def fold(self, *, policy: Policy) -> str:
        return f"{self.name}: {self}{policy.linesep}"


def message_id(key: str, sender: str) -> str:
    """Derived from the key: every copy of one mail carries the same Message-ID."""
    _, at, domain = parseaddr(sender)[1].rpartition("@")
    return f"<{key}@{domain if at and domain else 'localhost'}>"


def compose(outgoing: Outgoing, sender: str) -> EmailMessage:
    try:
        message = EmailMessage()
        message["From"] = sender
        message["To"] = Address(
            display_name=one_line(outgoing.recipient_name), addr_spec=outgoing.recipient
        )
        message["Subject"] = one_line(outgoing.content.subject, limit=250)
        message["Date"] = formatdate(usegmt=True)
        message["Message-ID"] = message_id(outgoing.key, sender)
        message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies, please
        for name, value in outgoing.headers:
            message[name] = Verbatim(name, value)
        message.set_content(outgoing.content.text)
    except (ValueError, IndexError, HeaderParseError) as exc:
        raise HandlerError(f"cannot compose mail {outgoing.key}: {exc}", permanent=True) from exc
    return message


def domain_of(address: str) -> str:
    return address.rpartition("@")[2].lower()


@dataclass(frozen=True)
class Mailer:
    sends: SendLog
    limiter: RateLimiter
    transport: Transport
    sender: str
    budget: UserBudget | None = None
    domains: DomainRate | None = None

    async def send_once(self, outgoing: Outgoing) -> bool:
        """Deliver ``outgoing`` unless its key was sent before; True when sent now."""
        message = compose(outgoing, self.sender)
        if await self.sends.is_sent(outgoing.key):
            log.info("mail already sent, skipped", key=outgoing.key)
            MAILS.labels("skipped").inc()
            return False
        if not await self._within_budget(outgoing):
            return False
        if self.domains is not None:
            domain = domain_of(outgoing.recipient)
            wait = await self.domains.due(domain)
            if wait:
                raise NotYet(f"mail to {domain} over its domain rate", retry_in_s=wait)
        await self.limiter.acquire()
        reservation = await self._reserve(outgoing)
        if reservation.outcome is Outcome.ALREADY_SENT:
            log.info("mail already sent, skipped", key=outgoing.key)
            MAILS.labels("skipped").inc()
            return False
        try:
            async with asyncio.timeout(SEND_DEADLINE):
                fresh = await self.transport.send(message, outgoing.key)
        except TimeoutError as exc:
            MAILS.labels("failed").inc()
            await self.sends.release(reservation)
            raise HandlerError(f"mail {outgoing.key}: no answer in {SEND_DEADLINE:.0f}s") from exc
        except Exception:
            MAILS.labels("failed").inc()
            await self.sends.release(reservation)
            raise
        MAILS.labels("sent").inc()
        # Logged before recording: the line must exist even if recording fails.
        log.info(
            "mail sent" if fresh else "mail found delivered",
            key=outgoing.key,
            recipient_domain=domain_of(outgoing.recipient),
            transport=self.transport.name,
        )
        await self.sends.mark_sent(reservation)
        return fresh

    async def _within_budget(self, outgoing: Outgoing) -> bool:
        if self.budget is None or outgoing.user_id is None:
            return True
        spent = await self.budget.spend(outgoing.user_id, outgoing.key)
        if spent is Spent.GRANTED:
            return True
        MAILS_WITHHELD.labels("over_budget").inc()
        log.warning(
            "mail over the user's budget, not sent",
            key=outgoing.key,
            user_id=outgoing.user_id,
            window=spent.name.lower(),
            hourly=self.budget.hourly,
            daily=self.budget.daily,
        )
        return False

    async def _reserve(self, outgoing: Outgoing) -> Reservation:
        """Reserve the key; while another worker holds it, wait for its outcome.

        A live holder finishes within its lease (the send is bounded), so the
        wait is bounded too: it ends when the key is sent (skip), released
        (ours now) or its lease expired (a crashed holder: ours now, see the
        window described in ``sluice.builtin.accounts.mail.idempotency``). A redelivery that
        overlaps the first delivery therefore settles in one attempt.
        """
        reservation = await self.sends.reserve(outgoing.key, outgoing.recipient)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.sends.lease.total_seconds() + 1
        pause = BUSY_POLL
        while reservation.outcome is Outcome.BUSY and loop.time() < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
            reservation = await self.sends.reserve(outgoing.key, outgoing.recipient)
        if reservation.outcome is Outcome.BUSY:
            raise HandlerError(
                f"mail {outgoing.key} is being sent by another worker"
                f" (lease until {reservation.lease_until}); retrying later"
            )
        return reservation
