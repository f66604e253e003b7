"""Users' reminders as stored, and the record of each occurrence that fired.

A reminder is never removed: deleting it sets ``deleted_at``, so an occurrence
being fired can check, in its own transaction, that the reminder still
stands; pausing it (its mails' one-click unsubscribe) sets ``paused_at``,
checked the same way. A one-shot reminder (``at`` set, ``cron`` and ``timezone`` '')
fires once, from ``sluice.builtin.reminders.one_shots``; ``due_at`` is its instant while it
is pending. ``reminder_occurrences`` has one row per (reminder, slot) that fired;
its primary key is what makes an occurrence fire once, whichever process gets
there first.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import msgspec

from sluice.app import Row, Store, Tx, db_time, from_db_time, optional_db_time, uuid7
from sluice.builtin.reminders.events import ReminderDue


class Reminder(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    owner_id: str
    cron: str
    timezone: str
    text: str
    created_at: datetime
    # Set by the one-click unsubscribe of its mails (or a PATCH): it does not fire.
    paused_at: datetime | None = None
    at: datetime | None = None  # a one-shot's instant; None for a cron reminder
    done_at: datetime | None = None  # when a one-shot fired
    # The last change of the schedule (or resume): no occurrence at or before it fires.
    rescheduled_at: datetime | None = None

    @property
    def one_shot(self) -> bool:
        return self.at is not None

    @property
    def status(self) -> Literal["active", "paused", "done"]:
        if self.done_at is not None:
            return "done"
        return "active" if self.paused_at is None else "paused"

    @property
    def due_at(self) -> datetime | None:
        """A one-shot's instant while it is pending (the ``reminders_due`` index)."""
        return self.at if self.one_shot and self.status == "active" else None


_COLUMNS = "id, owner_id, cron, timezone, text, created_at, paused_at, at, done_at, rescheduled_at"
_DELETED = 10  # the column after _COLUMNS in queries that read deleted_at
DONE_LISTED = 100  # fired one-shots a list shows, the newest


def _reminder(row: Row) -> Reminder:
    return Reminder(
        id=str(row[0]),
        owner_id=str(row[1]),
        cron=str(row[2]),
        timezone=str(row[3]),
        text=str(row[4]),
        created_at=from_db_time(row[5]),
        paused_at=optional_db_time(row[6]),
        at=optional_db_time(row[7]),
        done_at=optional_db_time(row[8]),
        rescheduled_at=optional_db_time(row[9]),
    )


def _db(moment: datetime | None) -> str | None:
    return None if moment is None else db_time(moment)


async def insert_reminder(tx: Tx, reminder: Reminder) -> None:
    await tx.execute(
        f"INSERT INTO reminders ({_COLUMNS}, due_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            reminder.id,
            reminder.owner_id,
            reminder.cron,
            reminder.timezone,
            reminder.text,
            db_time(reminder.created_at),
            _db(reminder.paused_at),
            _db(reminder.at),
            _db(reminder.done_at),
            _db(reminder.rescheduled_at),
            _db(reminder.due_at),
        ),
    )


async def count_active(tx: Tx | Store, owner_id: str) -> int:
    """The owner's cron reminders (paused ones too) that are not deleted."""
    row = await tx.fetchone(
        "SELECT COUNT(*) FROM reminders WHERE owner_id = ? AND deleted_at IS NULL AND at IS NULL",
        (owner_id,),
    )
    return int(row[0]) if row else 0


async def count_pending(tx: Tx | Store, owner_id: str) -> int:
    """The owner's one-shots that have not fired (paused ones too) and are not deleted."""
    row = await tx.fetchone(
        "SELECT COUNT(*) FROM reminders WHERE owner_id = ? AND deleted_at IS NULL"
        " AND at IS NOT NULL AND done_at IS NULL",
        (owner_id,),
    )
    return int(row[0]) if row else 0


async def active_of(store: Store, owner_id: str) -> list[Reminder]:
    """The owner's reminders that are not deleted, newest first (ids are UUIDv7): every
    one not done, and the newest ``DONE_LISTED`` fired one-shots (they pile up)."""
    mine = f"SELECT {_COLUMNS} FROM reminders WHERE owner_id = ? AND deleted_at IS NULL"
    rows = await store.fetchall(f"{mine} AND done_at IS NULL", (owner_id,))
    rows += await store.fetchall(
        f"{mine} AND done_at IS NOT NULL ORDER BY id DESC LIMIT {DONE_LISTED}", (owner_id,)
    )
    return sorted((_reminder(row) for row in rows), key=lambda r: r.id, reverse=True)


async def mark_deleted(tx: Tx, reminder_id: str, owner_id: str, now: datetime) -> bool:
    """Delete the owner's reminder; False when it is unknown, another's, or deleted already."""
    changed = await tx.execute(
        "UPDATE reminders SET deleted_at = ?, due_at = NULL"
        " WHERE id = ? AND owner_id = ? AND deleted_at IS NULL",
        (db_time(now), reminder_id, owner_id),
    )
    return changed > 0


async def own_for_update(tx: Tx, reminder_id: str, owner_id: str) -> Reminder | None:
    """The owner's reminder, not deleted, locked until ``tx`` ends (an edit's read)."""
    row = await tx.fetchone(
        f"SELECT {_COLUMNS} FROM reminders WHERE id = ? AND owner_id = ? AND deleted_at IS NULL"
        + tx.dialect.row_lock("update"),
        (reminder_id, owner_id),
    )
    return None if row is None else _reminder(row)


async def save_edit(tx: Tx, reminder: Reminder) -> None:
    """Store an edited reminder's new state (read with ``own_for_update``)."""
    await tx.execute(
        "UPDATE reminders SET cron = ?, timezone = ?, text = ?, paused_at = ?, at = ?,"
        " rescheduled_at = ?, due_at = ? WHERE id = ?",
        (
            reminder.cron,
            reminder.timezone,
            reminder.text,
            _db(reminder.paused_at),
            _db(reminder.at),
            _db(reminder.rescheduled_at),
            _db(reminder.due_at),
            reminder.id,
        ),
    )


@dataclass(frozen=True)
class Planned:
    """An active reminder as the scheduler loads it, with its last fired slot."""

    reminder: Reminder
    last_fired: datetime | None


async def all_active(store: Store) -> list[Planned]:
    """Every cron reminder neither deleted nor paused, with the latest slot it fired (any
    process). One-shots are not loaded: ``sluice.scheduler.one_shots`` reads them by
    due time."""
    columns = ", ".join(f"r.{c}" for c in _COLUMNS.split(", "))
    rows = await store.fetchall(
        f"SELECT {columns}, (SELECT MAX(o.scheduled_for) FROM reminder_occurrences o"
        " WHERE o.reminder_id = r.id) FROM reminders r"
        " WHERE r.deleted_at IS NULL AND r.paused_at IS NULL AND r.at IS NULL"
    )
    return [Planned(_reminder(row), optional_db_time(row[_DELETED])) for row in rows]


class Fired(enum.Enum):
    FIRED = "fired"  # recorded now, ReminderDue appended
    ALREADY = "already"  # this slot fired before (another process, or an earlier try)
    GONE = "gone"  # the reminder is deleted (or never existed): fire nothing, ever
    PAUSED = "paused"  # the reminder is paused: fire nothing while it is
    CHANGED = "changed"  # its schedule changed (PATCH) since this slot was planned


async def fire(
    tx: Tx,
    reminder_id: str,
    slot: datetime,
    now: datetime,
    *,
    trace_id: str = "",
    schedule: tuple[str, str] | None = None,
) -> Fired:
    """Record one occurrence and append its ``ReminderDue``, in the caller's transaction.

    The deletion check and the insert share the transaction, and the check
    locks the reminder's row until it commits (SQLite: ``BEGIN IMMEDIATE``
    orders it with every delete; PostgreSQL: ``FOR SHARE``, which a delete
    waits for, or which waits for a delete and then reads it), so once a
    deletion (or a pause) has committed no occurrence of that reminder fires anywhere.
    Likewise a PATCH of the schedule: a slot planned from another ``schedule`` (cron,
    zone) than the stored one, or not after ``rescheduled_at``, is ``CHANGED``.
    """
    row = await tx.fetchone(
        "SELECT r.owner_id, r.text, r.timezone, r.deleted_at, u.email, u.name, r.paused_at,"
        " r.cron, r.at, r.rescheduled_at"
        " FROM reminders r LEFT JOIN users u ON u.id = r.owner_id WHERE r.id = ?"
        + tx.dialect.row_lock("share", "r"),
        (reminder_id,),
    )
    if row is None or row[3] is not None or row[8] is not None:  # a one-shot is not ours
        return Fired.GONE
    if row[6] is not None:
        return Fired.PAUSED
    rescheduled = optional_db_time(row[9])
    if (schedule is not None and schedule != (str(row[7]), str(row[2]))) or (
        rescheduled is not None and slot <= rescheduled
    ):
        return Fired.CHANGED
    event = ReminderDue(
        reminder_id=reminder_id,
        owner_id=str(row[0]),
        scheduled_for=slot,
        text=str(row[1]),
        timezone=str(row[2]),
        email="" if row[4] is None else str(row[4]),
        name=None if row[5] is None else str(row[5]),
        event_id=uuid7(),
        trace_id=trace_id,
    )
    inserted = await tx.execute(
        "INSERT INTO reminder_occurrences (reminder_id, scheduled_for, event_id, fired_at)"
        " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (reminder_id, db_time(slot), event.event_id, db_time(now)),
    )
    if inserted == 0:
        return Fired.ALREADY
    await tx.append(event)
    return Fired.FIRED


async def fire_many(
    store: Store, due: Sequence[tuple[str, datetime, str, tuple[str, str] | None]], now: datetime
) -> list[Fired]:
    """Fire occurrences (reminder id, slot, trace id, the schedule planned from) in one
    transaction: one commit, one fsync."""
    async with store.transaction() as tx:
        return [
            await fire(tx, rid, slot, now, trace_id=trace_id, schedule=schedule)
            for rid, slot, trace_id, schedule in due
        ]


async def occurrences(store: Store, reminder_id: str) -> list[datetime]:
    """The slots that fired, oldest first."""
    rows = await store.fetchall(
        "SELECT scheduled_for FROM reminder_occurrences WHERE reminder_id = ?"
        " ORDER BY scheduled_for",
        (reminder_id,),
    )
    return [from_db_time(row[0]) for row in rows]


class Paused(enum.Enum):
    NOW = "now"  # paused by this call
    ALREADY = "already"  # paused before: nothing changed
    DELETED = "deleted"  # deleted: it fires nothing anyway
    UNKNOWN = "unknown"


async def pause(tx: Tx, reminder_id: str, now: datetime) -> tuple[Paused, Reminder | None]:
    """Pause a reminder (whoever asks: the caller checked the right to); its new state."""
    changed = await tx.execute(
        "UPDATE reminders SET paused_at = ?, due_at = NULL WHERE id = ? AND deleted_at IS NULL"
        " AND paused_at IS NULL",
        (db_time(now), reminder_id),
    )
    row = await tx.fetchone(
        f"SELECT {_COLUMNS}, deleted_at FROM reminders WHERE id = ?", (reminder_id,)
    )
    if row is None:
        return Paused.UNKNOWN, None
    if row[_DELETED] is not None:
        return Paused.DELETED, _reminder(row)
    return (Paused.NOW if changed else Paused.ALREADY), _reminder(row)


async def find(store: Store, reminder_id: str) -> tuple[Reminder, bool] | None:
    """A reminder by id whoever owns it, and whether it is deleted; None when unknown."""
    row = await store.fetchone(
        f"SELECT {_COLUMNS}, deleted_at FROM reminders WHERE id = ?", (reminder_id,)
    )
    return None if row is None else (_reminder(row), row[_DELETED] is not None)


@dataclass(frozen=True)
class MailTarget:
    """Where an occurrence's mail goes, read when it is sent."""

    owner_id: str
    email: str
    name: str | None
    verified: bool
    paused: bool


async def mail_target(store: Store, reminder_id: str) -> MailTarget | None:
    """The owner's address as stored now, whether it is verified, and whether the reminder
    is paused; None when the reminder or its owner does not exist."""
    row = await store.fetchone(
        "SELECT u.id, u.email, u.name, u.verified_at, r.paused_at"
        " FROM reminders r JOIN users u ON u.id = r.owner_id WHERE r.id = ?",
        (reminder_id,),
    )
    if row is None:
        return None
    return MailTarget(
        owner_id=str(row[0]),
        email=str(row[1]),
        name=None if row[2] is None else str(row[2]),
        verified=row[3] is not None,
        paused=row[4] is not None,
    )
