"""The accounts app's writes to the core's users and tokens tables: registration, tokens
issued and revoked, a password changed. The core reads these tables (``require_user``
finds a token's user by its hash, ``token_hash``) and purges expired tokens."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime

import msgspec

from sluice.app import Store, Tx, User, db_time, from_db_time
from sluice.app.advanced import email_key, token_hash


class EmailTaken(Exception):
    pass


async def insert_user(tx: Tx, user: User, password_hash: str) -> None:
    """Raises ``EmailTaken`` when the email (case-insensitively) is registered already."""
    inserted = await tx.execute(
        "INSERT INTO users (id, email, email_key, name, password_hash, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (email_key) DO NOTHING",
        (
            user.id,
            user.email,
            email_key(user.email),
            user.name,
            password_hash,
            db_time(user.created_at),
        ),
    )
    if inserted == 0:
        raise EmailTaken(user.email)


async def insert_token(
    store: Store, token: str, user_id: str, now: datetime, expires: datetime
) -> None:
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO tokens (token_hash, user_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
            (token_hash(token), user_id, db_time(now), db_time(expires)),
        )


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
        TokenRow(
            id=token_id(str(stored)),
            created_at=from_db_time(created),
            expires_at=from_db_time(expires),
            current=stored == mine,
        )
        for stored, created, expires in rows
    ]


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
