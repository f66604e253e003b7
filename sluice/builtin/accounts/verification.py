"""Whether a user's address is verified, and when a new verification link was last asked for.

``users.verified_at`` is set once, by the first use of a valid link; a second
use finds it set and changes nothing. The link names the address it was sent
to, so a link for an address the user no longer has verifies nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from sluice.app import Store, Tx, db_time, from_db_time
from sluice.app.advanced import email_key
from sluice.builtin.accounts.events import UserVerified


class Verified(enum.Enum):
    NOW = "now"  # this call verified the address
    ALREADY = "already"  # verified before (the link was followed twice): nothing changed
    UNKNOWN = "unknown"  # no such user, or the link was for an address the user no longer has


@dataclass(frozen=True)
class Verification:
    outcome: Verified
    email: str = ""
    verified_at: datetime | None = None


async def verify(
    store: Store, user_id: str, email: str, now: datetime, trace_id: str
) -> Verification:
    """Mark the address verified (once) and append ``UserVerified`` in the same transaction."""
    async with store.transaction() as tx:
        changed = await tx.execute(
            "UPDATE users SET verified_at = ?"
            " WHERE id = ? AND email_key = ? AND verified_at IS NULL",
            (db_time(now), user_id, email_key(email)),
        )
        row = await tx.fetchone(
            "SELECT email, verified_at FROM users WHERE id = ? AND email_key = ?",
            (user_id, email_key(email)),
        )
        if row is None:
            return Verification(Verified.UNKNOWN)
        if changed:
            await tx.append(UserVerified(user_id=user_id, email=str(row[0]), trace_id=trace_id))
    outcome = Verified.NOW if changed else Verified.ALREADY
    return Verification(outcome, str(row[0]), from_db_time(row[1]))


class Requested(enum.Enum):
    OK = "ok"  # recorded: a new link may be sent
    VERIFIED = "verified"  # nothing to do: the address is verified
    TOO_SOON = "too_soon"  # the last link (or the welcome mail) is younger than the cooldown
    USED_UP = "used_up"  # the account had all the new links it may have


async def request_link(
    tx: Tx, user_id: str, now: datetime, cooldown: timedelta, most: int
) -> tuple[Requested, datetime | None]:
    """Record a request for a new link: at most ``most`` per account, one per ``cooldown``
    (the welcome mail, sent at registration, counts as the first); with TOO_SOON, when the
    next may come."""
    changed = await tx.execute(
        "UPDATE users SET verification_requested_at = ?,"
        " verification_requests = verification_requests + 1"
        " WHERE id = ? AND verified_at IS NULL AND verification_requests < ?"
        " AND COALESCE(verification_requested_at, created_at) <= ?",
        (db_time(now), user_id, most, db_time(now - cooldown)),
    )
    if changed:
        return Requested.OK, None
    row = await tx.fetchone(
        "SELECT verified_at, verification_requests,"
        " COALESCE(verification_requested_at, created_at) FROM users WHERE id = ?",
        (user_id,),
    )
    if row is None or row[0] is not None:
        return Requested.VERIFIED, None
    if int(row[1]) >= most:
        return Requested.USED_UP, None
    return Requested.TOO_SOON, from_db_time(row[2]) + cooldown
