"""The texts of the mails sluice sends: plain text, one function per kind of mail.

A template only renders words; headers, the idempotency key and the
Message-ID are the sender's business (``sluice.builtin.accounts.mail.sending``), so a new kind
of mail is a new function here and a new handler, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sluice.builtin.accounts.mail.links import NEW_LINKS_MAX, VERIFY_TTL


@dataclass(frozen=True)
class Content:
    subject: str
    text: str


def one_line(value: str | None, limit: int = 200) -> str:
    """``value`` without line breaks or control characters, for a header or a greeting."""
    if not value:
        return ""
    printable = "".join(ch if ch.isprintable() else " " for ch in value)
    return " ".join(printable.split())[:limit]


def _greeting(name: str | None) -> str:
    who = one_line(name)
    return f"Hello {who}," if who else "Hello,"


def welcome(name: str | None, base_url: str, verify_url: str) -> Content:
    """The mail a user receives once, after registering, with the link that verifies the
    address. Nothing else reaches the address before that link is followed."""
    text = (
        f"{_greeting(name)}\n\n"
        "welcome to sluice. Your account is ready: create short links, follow their\n"
        "visits and set up reminders.\n\n"
        "Please confirm that this address is yours:\n\n"
        f"  {verify_url}\n\n"
        f"The link is valid for {VERIFY_TTL.days} days. Until this address is confirmed,\n"
        "sluice sends it nothing but confirmation links like this one (a new one only\n"
        f"when the account asks: {NEW_LINKS_MAX} at most, one an hour).\n"
        "Reminders are mailed only once it is confirmed.\n\n"
        f"Sign in at {base_url.rstrip('/')}/\n\n"
        "You receive this mail because this address was used to register.\n"
        "If that was not you, ignore it and do not confirm: this address then gets\n"
        "no reminders from sluice.\n"
    )
    return Content(subject="Welcome to sluice", text=text)


def verification(name: str | None, verify_url: str) -> Content:
    """A new verification link, asked for by the account (the welcome mail had the first)."""
    text = (
        f"{_greeting(name)}\n\n"
        "please confirm that this address is yours:\n\n"
        f"  {verify_url}\n\n"
        f"The link is valid for {VERIFY_TTL.days} days. Reminders are mailed to this address\n"
        "only once it is confirmed.\n\n"
        "You receive this mail because the sluice account registered with this address\n"
        "asked for a new confirmation link. If that was not you, ignore it and do not\n"
        "confirm: this address then gets no reminders from sluice.\n"
    )
    return Content(subject="Confirm your address for sluice", text=text)


def reminder(text: str, scheduled_for: datetime, timezone: str, unsubscribe_url: str) -> Content:
    """One occurrence of a user's reminder, its time shown in the reminder's own zone, with
    the link that pauses it (the same as the mail's List-Unsubscribe)."""
    try:
        local = scheduled_for.astimezone(ZoneInfo(timezone))
        when = local.strftime("%Y-%m-%d %H:%M %Z")
    except (ZoneInfoNotFoundError, ValueError):
        when = scheduled_for.strftime("%Y-%m-%d %H:%M UTC")
    headline = one_line(text, limit=80) or "(no text)"
    body = (
        f"Reminder for {when}:\n\n"
        f"{text.strip() or '(no text)'}\n\n"
        "You set up this reminder in sluice; delete it there to stop these mails.\n"
        "To pause it now, no sign-in needed:\n\n"
        f"  {unsubscribe_url}\n"
    )
    return Content(subject=f"Reminder: {headline}", text=body)
