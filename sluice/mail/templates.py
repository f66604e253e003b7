"""The texts of the mails sluice sends: plain text, one function per kind of mail.

A template only renders words; headers, the idempotency key and the
Message-ID are the sender's business (``sluice.mail.sending``), so a new kind
of mail is a new function here and a new handler, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


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


def welcome(name: str | None, base_url: str) -> Content:
    """The mail a user receives once, after registering."""
    who = one_line(name)
    greeting = f"Hello {who}," if who else "Hello,"
    text = (
        f"{greeting}\n\n"
        "welcome to sluice. Your account is ready: create short links, follow their\n"
        "visits and set up reminders.\n\n"
        f"Sign in at {base_url.rstrip('/')}/\n\n"
        "You receive this mail because this address was used to register.\n"
        "If that was not you, ignore it: nothing else will be sent.\n"
    )
    return Content(subject="Welcome to sluice", text=text)


def reminder(text: str, scheduled_for: datetime, timezone: str) -> Content:
    """One occurrence of a user's reminder, its time shown in the reminder's own zone."""
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
    )
    return Content(subject=f"Reminder: {headline}", text=body)
