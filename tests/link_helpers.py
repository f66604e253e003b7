"""Links, users and tokens written straight into the store, as the links API commits them."""

from __future__ import annotations

from datetime import datetime, timedelta

from sluice.builtin.links.events import LinkCreated, LinkUpdated
from sluice.events import utcnow
from sluice.store import Store
from sluice.store.users import db_time, token_hash

OWNER = "user-owner"
OWNER_TOKEN = "owner-token-0123456789"
OTHER = "user-other"
OTHER_TOKEN = "other-token-0123456789"

# Real User-Agents of the kinds a short link sees.
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko)"
    " Chrome/120.0.0.0 Safari/537.36"
)
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
SLACKBOT = "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"
FACEBOOK = "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)"


async def add_user(store: Store, user_id: str = OWNER, token: str = OWNER_TOKEN) -> None:
    now = utcnow()
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO users (id, email, email_key, name, password_hash, created_at)"
            " VALUES (?, ?, ?, NULL, 'x', ?) ON CONFLICT (id) DO NOTHING",
            (user_id, f"{user_id}@example.org", f"{user_id}@example.org", db_time(now)),
        )
        await tx.execute(
            "INSERT INTO tokens (token_hash, user_id, created_at, expires_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (token_hash) DO NOTHING",
            (token_hash(token), user_id, db_time(now), db_time(now + timedelta(days=1))),
        )


async def add_link(
    store: Store,
    code: str,
    url: str,
    *,
    owner: str = OWNER,
    expires_at: datetime | None = None,
    disabled: bool = False,
) -> None:
    """The link row and its ``LinkCreated``, in one transaction (the owner is created too)."""
    await add_user(store, owner, f"{owner}-token-0123456789")
    now = utcnow()
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO links (code, owner_id, url, expires_at, disabled, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                code,
                owner,
                url,
                None if expires_at is None else db_time(expires_at),
                int(disabled),
                db_time(now),
                db_time(now),
            ),
        )
        await tx.append(
            LinkCreated(
                code=code, owner_id=owner, url=url, expires_at=expires_at, disabled=disabled
            )
        )


async def change_link(
    store: Store,
    code: str,
    url: str,
    *,
    owner: str = OWNER,
    expires_at: datetime | None = None,
    disabled: bool = False,
    event: bool = True,
) -> None:
    """Update the row and (unless ``event`` is false) commit ``LinkUpdated`` with it."""
    async with store.transaction() as tx:
        await tx.execute(
            "UPDATE links SET url = ?, expires_at = ?, disabled = ?, updated_at = ? WHERE code = ?",
            (
                url,
                None if expires_at is None else db_time(expires_at),
                int(disabled),
                db_time(utcnow()),
                code,
            ),
        )
        if event:
            await tx.append(
                LinkUpdated(
                    code=code, owner_id=owner, url=url, expires_at=expires_at, disabled=disabled
                )
            )


def bearer(token: str = OWNER_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
