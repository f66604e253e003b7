"""Users and their bearer tokens. Tokens are stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import msgspec

from sluice.store.base import Store


class User(msgspec.Struct, frozen=True, kw_only=True):
    """A registered user, as ``require_user`` and ``optional_user`` return the caller."""

    id: str
    email: str
    name: str | None
    created_at: datetime
    # When the user followed a verification link; until then only the welcome mail (and
    # verification mails) may go to the address.
    verified_at: datetime | None = None


def email_key(email: str) -> str:
    """Emails compare case-insensitively."""
    return email.strip().casefold()


def db_time(moment: datetime) -> str:
    """A fixed-width UTC timestamp, so the database can compare them as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_db_time(value: object) -> datetime:
    """A timestamp as ``db_time`` wrote it (or any ISO 8601 text), back as a datetime."""
    return datetime.fromisoformat(str(value))


def optional_db_time(value: object) -> datetime | None:
    """``from_db_time`` for a nullable column: None stays None."""
    return None if value is None else from_db_time(value)


def token_hash(token: str) -> str:
    """The SHA-256 of a bearer token, in hex: what the tokens table keeps instead of it."""
    return hashlib.sha256(token.encode()).hexdigest()


_USER_COLUMNS = "id, email, name, created_at, verified_at"


def _user(row: tuple[object, ...]) -> User:
    return User(
        id=str(row[0]),
        email=str(row[1]),
        name=None if row[2] is None else str(row[2]),
        created_at=datetime.fromisoformat(str(row[3])),
        verified_at=optional_db_time(row[4]),
    )


async def credentials(store: Store, email: str) -> tuple[str, str] | None:
    """(user id, password hash) for an email, or None."""
    row = await store.fetchone(
        "SELECT id, password_hash FROM users WHERE email_key = ?", (email_key(email),)
    )
    return None if row is None else (str(row[0]), str(row[1]))


async def user_by_id(store: Store, user_id: str) -> User | None:
    """The user with this id, None when there is none (deleted, or never was)."""
    row = await store.fetchone(f"SELECT {_USER_COLUMNS} FROM users WHERE id = ?", (user_id,))
    return None if row is None else _user(row)


async def user_for_token(store: Store, token: str, now: datetime) -> User | None:
    """The token's user while the token exists and has not expired."""
    row = await store.fetchone(
        f"SELECT {', '.join('u.' + c for c in _USER_COLUMNS.split(', '))}"
        " FROM tokens t JOIN users u ON u.id = t.user_id"
        " WHERE t.token_hash = ? AND t.expires_at > ?",
        (token_hash(token), db_time(now)),
    )
    return None if row is None else _user(row)
