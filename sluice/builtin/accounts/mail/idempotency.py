"""Idempotency keys of outgoing mail, kept in the database (table ``mail_sends``).

Every mail has a key (``welcome_<user id>``, ``reminder_<id>_<slot>``). Before
sending, a worker *reserves* the key with one atomic statement: it inserts a
``reserved`` row carrying its own holder token and a lease, or takes over a
``reserved`` row whose lease has expired. The outcomes never blur:

- reserved by me: send;
- already ``sent``: skip, the mail went out before;
- reserved by another holder whose lease is live: someone is sending it right
  now; retry later, never send;
- the database did not answer: *could not check*. That is an error (the
  delivery is retried), never a licence to send and never "already sent".

When the SMTP server accepted the message (250), the row becomes ``sent`` at
once. When sending failed, the row is deleted (released) so a retry can send.

The one window that no design closes
------------------------------------
Between the server's 250 and the commit of ``sent`` there is a moment (a
write to the local database, milliseconds) in which a crash (``kill -9``,
power loss) leaves the row ``reserved``. Nobody else sends while that lease
is live; after it expires, a retry takes the key over and sends the mail a
second time. The same holds when the connection drops after the final "." of
DATA but before the server's reply (RFC 1047): the sender cannot know whether
the server accepted. SMTP has no way to ask a server "did you get message X",
so a sender must pick at-most-once or at-least-once for that window.
sluice picks at-least-once: a rare duplicate welcome or reminder (which
carries the same deterministic ``Message-ID``, so many mail systems fold the
two) is a lesser harm than a user who never receives a mail the system
recorded as due. Everything outside that window is exactly once.

A reservation whose outcome this process does not know
------------------------------------------------------
A reserve whose COMMIT lost the connection (the database crashed or restarted
right then) may have committed; a release that failed left the row reserved.
Either way the row carries a holder token nobody uses any more, with a live
lease, and the retry of the delivery would wait out that lease (two minutes)
although the holder is this very process. ``SendLog`` therefore remembers such
in-doubt holders per key, and the next ``reserve`` of the key in this process
reuses the token, so it takes over its own row at once. Only one caller gets a
remembered token (it is taken from the map), so two deliveries of one key
running side by side still never both hold it.

Leases compare timestamps written by the workers' own clocks; with SQLite all
workers share one host, and with a shared database clocks must agree to well
under the lease.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from sluice.app import HandlerError, Store, utcnow

log = structlog.get_logger(__name__)

# Longer than a send may take (sluice.builtin.accounts.mail.sending bounds it to a minute) plus
# recording it (retried for a quarter of the lease): a live holder always
# finishes within its lease.
LEASE = timedelta(minutes=2)

_RESERVE = """
INSERT INTO mail_sends (key, state, holder, lease_until, recipient, reserved_at)
VALUES (?, 'reserved', ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    holder = excluded.holder,
    lease_until = excluded.lease_until,
    recipient = excluded.recipient,
    reserved_at = excluded.reserved_at
WHERE mail_sends.state = 'reserved' AND (mail_sends.lease_until < ? OR mail_sends.holder = ?)
"""

# In-doubt holders kept per SendLog; past this the oldest are forgotten (their keys then
# wait for their lease, as before).
IN_DOUBT_MAX = 10_000


class Outcome(enum.Enum):
    RESERVED = "reserved"  # ours: send
    ALREADY_SENT = "sent"  # skip
    BUSY = "busy"  # another holder's lease is live: retry later, never send


@dataclass(frozen=True)
class Reservation:
    key: str
    recipient: str
    holder: str
    outcome: Outcome
    lease_until: str = ""  # the lease of whoever holds the key now


class CouldNotCheck(HandlerError):
    """The database did not answer: the key's state is unknown, so nothing is sent."""


class NotRecorded(HandlerError):
    """The mail went out but ``sent`` could not be recorded; the reservation stays."""


def stamp(moment: datetime) -> str:
    """Fixed-width UTC text, so SQL compares leases as strings in time order."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SendLog:
    """Reserve, release and record mail idempotency keys in the store."""

    def __init__(
        self,
        store: Store,
        *,
        lease: timedelta = LEASE,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.lease = lease
        self.clock = clock
        self._in_doubt: dict[str, str] = {}  # key -> a holder whose row may exist

    def _remember(self, key: str, holder: str) -> None:
        """``holder`` may hold ``key`` in the database: the next reserve of it reuses it."""
        self._in_doubt[key] = holder
        if len(self._in_doubt) > IN_DOUBT_MAX:
            del self._in_doubt[next(iter(self._in_doubt))]

    async def is_sent(self, key: str) -> bool:
        """A cheap read before queueing for the rate limit; ``reserve`` decides."""
        try:
            row = await self.store.fetchone("SELECT state FROM mail_sends WHERE key = ?", (key,))
        except Exception as exc:
            raise CouldNotCheck(f"could not check mail {key}: {exc}") from exc
        return row is not None and row[0] == "sent"

    async def reserve(self, key: str, recipient: str) -> Reservation:
        holder = self._in_doubt.pop(key, None) or uuid.uuid4().hex
        now = self.clock()
        lease_until = stamp(now + self.lease)
        params = (key, holder, lease_until, recipient, stamp(now), stamp(now), holder)
        try:
            async with self.store.transaction() as tx:
                changed = await tx.execute(_RESERVE, params)
                row = (
                    None
                    if changed
                    else await tx.fetchone(
                        "SELECT state, lease_until FROM mail_sends WHERE key = ?", (key,)
                    )
                )
        except Exception as exc:
            self._remember(key, holder)  # the COMMIT may have happened without its answer
            raise CouldNotCheck(f"could not check mail {key}: {exc}") from exc
        if changed:
            return Reservation(key, recipient, holder, Outcome.RESERVED, lease_until)
        if row is None:  # cannot happen inside one transaction; never read it as "sent"
            raise CouldNotCheck(f"mail {key}: neither reserved nor found")
        outcome = Outcome.ALREADY_SENT if row[0] == "sent" else Outcome.BUSY
        return Reservation(key, recipient, holder, outcome, str(row[1]))

    async def release(self, reservation: Reservation) -> None:
        """Give the key back after a failed send. Never raises: the lease is the fallback."""
        try:
            async with self.store.transaction() as tx:
                await tx.execute(
                    "DELETE FROM mail_sends WHERE key = ? AND holder = ? AND state = 'reserved'",
                    (reservation.key, reservation.holder),
                )
        except Exception as exc:
            self._remember(reservation.key, reservation.holder)
            log.warning(
                "mail: could not release reservation; this process takes it back on its next try",
                key=reservation.key,
                lease_until=reservation.lease_until,
                error=str(exc),
            )

    async def mark_sent(self, reservation: Reservation) -> None:
        """Record that the server accepted the mail; retried while our lease protects the key.

        Recorded even when our lease was taken over meanwhile: the server did
        accept this mail, and only a ``sent`` row stops further copies.
        """
        deadline = asyncio.get_running_loop().time() + self.lease.total_seconds() / 4
        delay = 0.05
        while True:
            try:
                await self._record_sent(reservation)
                return
            except Exception as exc:
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise NotRecorded(
                        f"mail {reservation.key} was sent but could not be recorded: {exc}"
                    ) from exc
                log.warning("mail: recording sent failed, retrying", key=reservation.key)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _record_sent(self, reservation: Reservation) -> None:
        now = stamp(self.clock())
        async with self.store.transaction() as tx:
            ours = await tx.execute(
                "UPDATE mail_sends SET state = 'sent', sent_at = ?"
                " WHERE key = ? AND holder = ? AND state = 'reserved'",
                (now, reservation.key, reservation.holder),
            )
            if ours:
                return
            await tx.execute(
                "INSERT INTO mail_sends (key, state, holder, lease_until, recipient,"
                " reserved_at, sent_at) VALUES (?, 'sent', ?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET state = 'sent', sent_at = excluded.sent_at"
                " WHERE mail_sends.state = 'reserved'",
                (reservation.key, reservation.holder, now, reservation.recipient, now, now),
            )
        log.error(
            "mail: lease was lost while sending; another copy may go out",
            key=reservation.key,
        )
