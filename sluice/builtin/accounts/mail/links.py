"""Signed links in mails: verifying an address, and the one-click unsubscribe of a reminder.

A link carries what it is about and an HMAC-SHA256 of it, keyed with a secret
every host shares (table ``secrets``, made once; see ``sluice.store.secrets``):
the mail worker that writes the link and the API replica that checks it may run
on different hosts. Nothing about a link is stored, so there is nothing to
look up or to clean up; following one twice does what it did the first time.

- verification: ``v1.<user id>.<expiry, Unix seconds>.<mac>``, the MAC also
  covering the address it was sent to (a link verifies that address only);
  valid ``VERIFY_TTL`` (7 days);
- unsubscribe: ``u1.<reminder id>.<mac>``, without expiry: RFC 8058 expects the
  link of an old mail to keep working.

Each kind has its own MAC input prefix, so one kind can never pass for the other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from sluice.app import Store
from sluice.app.advanced import email_key, shared_secret

SECRET = "mail-link-key"
VERIFY_TTL = timedelta(days=7)
# New links after the welcome mail's: at most this many per account, one an hour (the
# welcome mail counting as the first), so an address someone else registered gets a few
# mails at most, while its owner can still recover from a lost or expired link.
NEW_LINK_COOLDOWN = timedelta(hours=1)
NEW_LINKS_MAX = 3
VERIFY_PATH = "/v1/verify"
UNSUBSCRIBE_PATH = "/v1/unsubscribe"

_ID = r"[A-Za-z0-9_-]{1,64}"
_MAC = r"[A-Za-z0-9_-]{43}"
_VERIFY = re.compile(rf"v1\.({_ID})\.([0-9]{{1,10}})\.({_MAC})")
_UNSUBSCRIBE = re.compile(rf"u1\.({_ID})\.({_MAC})")


class BadLink(Exception):
    """Not a link sluice made: malformed, or its MAC does not match."""


@dataclass(frozen=True)
class VerifyLink:
    """A verification token taken apart; ``signed_for`` says whether it is genuine."""

    user_id: str
    expires_at: datetime
    expiry: str
    mac: str = field(repr=False)

    def signed_for(self, key: bytes, email: str) -> bool:
        """True when sluice made this link for ``email`` (the address the user has now)."""
        expected = _mac(key, "verify", self.user_id, email_key(email), self.expiry)
        return hmac.compare_digest(self.mac, expected)

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


async def load_link_key(store: Store) -> bytes:
    """The shared key, made by whichever process needs it first."""
    return (await shared_secret(store, SECRET, secrets.token_urlsafe(32))).encode()


class LinkKey:
    """The shared key, read from the database on first use and kept."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._key: bytes | None = None

    async def get(self) -> bytes:
        if self._key is None:
            self._key = await load_link_key(self._store)
        return self._key


def _mac(key: bytes, *parts: str) -> str:
    digest = hmac.new(key, "\0".join(parts).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def verify_token(key: bytes, user_id: str, email: str, expires_at: datetime) -> str:
    expiry = str(int(expires_at.timestamp()))
    return f"v1.{user_id}.{expiry}.{_mac(key, 'verify', user_id, email_key(email), expiry)}"


def parse_verify_token(token: str) -> VerifyLink:
    """The parts of a token shaped like a verification link; ``BadLink`` otherwise. The
    user id is needed to look the address up before the MAC can be checked."""
    match = _VERIFY.fullmatch(token)
    if match is None:
        raise BadLink("not a verification link")
    user_id, expiry, mac = match.groups()
    return VerifyLink(user_id, datetime.fromtimestamp(int(expiry), UTC), expiry, mac)


def unsubscribe_token(key: bytes, reminder_id: str) -> str:
    return f"u1.{reminder_id}.{_mac(key, 'unsubscribe', reminder_id)}"


def check_unsubscribe_token(key: bytes, token: str) -> str:
    """The reminder id of a genuine unsubscribe token; ``BadLink`` otherwise."""
    match = _UNSUBSCRIBE.fullmatch(token)
    if match is None:
        raise BadLink("not an unsubscribe link")
    reminder_id, mac = match.groups()
    if not hmac.compare_digest(mac, _mac(key, "unsubscribe", reminder_id)):
        raise BadLink("the link's signature does not match")
    return reminder_id


def link(base_url: str, path: str, token: str) -> str:
    return f"{base_url.rstrip('/')}{path}?token={quote(token, safe='')}"
