"""Users and their bearer tokens. Tokens are stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import msgspec

from sluice.store.base import Store, Tx


class User(msgspec.Struct, frozen=True, kw_only=True):
    """A registered user, as ``require_user`` and ``optional_user`` return the caller."""

    id: str
    email: str
    name: str | None
    created_at: datetime
    # When the user followed a verification link; until then only the welcome mail (and
    # verification mails) may go to the address.
    verified_at: datetime | None = None


class EmailTaken(Exception):
    pass


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


async def insert_user(tx: Tx, user: User, password_hash: str) -> None:
    """Raises ``EmailTaken`` when the email (case-insensitively) is registered already."""
    inserted = await tx.execute(
        "INSERT INTO users (id, email, email_key, name, password_hash, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (email_key) DO NOTHING",
        (user.id, user.email, email_key(user.email), user.name, password_hash,
         db_time(user.created_at)),
    )  # fmt: skip
    if inserted == 0:
        raise EmailTaken(user.email)


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


async def insert_token(
    store: Store, token: str, user_id: str, now: datetime, expires: datetime
) -> None:
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO tokens (token_hash, user_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
            (token_hash(token), user_id, db_time(now), db_time(expires)),
        )


async def user_for_token(store: Store, token: str, now: datetime) -> User | None:
    """The token's user while the token exists and has not expired."""
    row = await store.fetchone(
        f"SELECT {', '.join('u.' + c for c in _USER_COLUMNS.split(', '))}"
        " FROM tokens t JOIN users u ON u.id = t.user_id"
        " WHERE t.token_hash = ? AND t.expires_at > ?",
        (token_hash(token), db_time(now)),
    )
    return None if row is None else _user(row)


async def delete_token(store: Store, token: str) -> bool:
    async with store.transaction() as tx:
        return await tx.execute("DELETE FROM tokens WHERE token_hash = ?", (token_hash(token),)) > 0


class TokenRow(msgspec.Struct, frozen=True, kw_only=True):
    """A token as its owner may see it: never the token nor its hash."""

    id: str
    created_at: datetime
    expires_at: datetime
    current: bool


def token_id(stored_hash: str) -> str:
    """A token's public id: derived from its stored hash, one way, so that neither the
    token nor the hash it is looked up by can be learnt from it."""
    return hashlib.sha256(f"sluice token id {stored_hash}".encode()).hexdigest()[:24]


async def user_tokens(store: Store, user_id: str, current: str, now: datetime) -> list[TokenRow]:
    """The user's tokens that have not expired, newest first; ``current``: the token of
    the request asking."""
    rows = await store.fetchall(
        "SELECT token_hash, created_at, expires_at FROM tokens"
        " WHERE user_id = ? AND expires_at > ? ORDER BY created_at DESC, token_hash",
        (user_id, db_time(now)),
    )
    mine = token_hash(current)
    return [
        TokenRow(id=token_id(str(stored)), created_at=from_db_time(created),
                 expires_at=from_db_time(expires), current=stored == mine)
        for stored, created, expires in rows
    ]  # fmt: skip


async def delete_user_token(store: Store, user_id: str, public_id: str, now: datetime) -> bool:
    """Revoke the user's token whose id is ``public_id``; False when the user has none."""
    async with store.transaction() as tx:
        rows = await tx.fetchall(
            "SELECT token_hash FROM tokens WHERE user_id = ? AND expires_at > ?",
            (user_id, db_time(now)),
        )
        for (stored,) in rows:
            if hmac.compare_digest(token_id(str(stored)), public_id):
                await tx.execute("DELETE FROM tokens WHERE token_hash = ?", (stored,))
                return True
    return False


async def change_password(store: Store, user_id: str, password_hash: str, keep: str) -> int:
    """Set the user's password hash and revoke every token of theirs but ``keep``: how
    many were revoked."""
    async with store.transaction() as tx:
        await tx.execute(
            "UPDATE users SET password_hash = ? WHERE id = ?", (password_hash, user_id)
        )
        return await tx.execute(
            "DELETE FROM tokens WHERE user_id = ? AND token_hash <> ?",
            (user_id, token_hash(keep)),
        )
