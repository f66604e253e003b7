"""Users' reminders as stored, and the record of each occurrence that fired.

A reminder is never removed: deleting it sets ``deleted_at``, so an occurrence
being fired can check, in its own transaction, that the reminder still
stands. ``reminder_occurrences`` has one row per (reminder, slot) that fired;
its primary key is what makes an occurrence fire once, whichever process gets
there first.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import msgspec

from sluice.events import ReminderDue, uuid7
from sluice.store.base import Row, Store, Tx
from sluice.store.users import db_time, from_db_time, optional_db_time


class Reminder(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    owner_id: str
    cron: str
    timezone: str
    text: str
    created_at: datetime


_COLUMNS = "id, owner_id, cron, timezone, text, created_at"


def _reminder(row: Row) -> Reminder:
    return Reminder(
        id=str(row[0]), owner_id=str(row[1]), cron=str(row[2]), timezone=str(row[3]),
        text=str(row[4]), created_at=from_db_time(row[5]),
    )  # fmt: skip


async def insert_reminder(tx: Tx, reminder: Reminder) -> None:
    await tx.execute(
        f"INSERT INTO reminders ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        (reminder.id, reminder.owner_id, reminder.cron, reminder.timezone, reminder.text,
         db_time(reminder.created_at)),
    )  # fmt: skip


async def count_active(tx: Tx, owner_id: str) -> int:
    row = await tx.fetchone(
        "SELECT COUNT(*) FROM reminders WHERE owner_id = ? AND deleted_at IS NULL", (owner_id,)
    )
    return int(row[0]) if row else 0


async def active_of(store: Store, owner_id: str) -> list[Reminder]:
    """The owner's reminders that are not deleted, newest first (ids are UUIDv7)."""
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM reminders WHERE owner_id = ? AND deleted_at IS NULL"
        " ORDER BY id DESC",
        (owner_id,),
    )
    return [_reminder(row) for row in rows]


async def mark_deleted(tx: Tx, reminder_id: str, owner_id: str, now: datetime) -> bool:
    """Delete the owner's reminder; False when it is unknown, another's, or deleted already."""
    changed = await tx.execute(
        "UPDATE reminders SET deleted_at = ? WHERE id = ? AND owner_id = ? AND deleted_at IS NULL",
        (db_time(now), reminder_id, owner_id),
    )
    return changed > 0


@dataclass(frozen=True)
class Planned:
    """An active reminder as the scheduler loads it, with its last fired slot."""

    reminder: Reminder
    last_fired: datetime | None


async def all_active(store: Store) -> list[Planned]:
    """Every reminder not deleted, with the latest slot it fired (any process)."""
    columns = ", ".join(f"r.{c}" for c in _COLUMNS.split(", "))
    rows = await store.fetchall(
        f"SELECT {columns}, (SELECT MAX(o.scheduled_for) FROM reminder_occurrences o"
        " WHERE o.reminder_id = r.id) FROM reminders r WHERE r.deleted_at IS NULL"
    )
    return [Planned(_reminder(row), optional_db_time(row[6])) for row in rows]


class Fired(enum.Enum):
    FIRED = "fired"  # recorded now, ReminderDue appended
    ALREADY = "already"  # this slot fired before (another process, or an earlier try)
    GONE = "gone"  # the reminder is deleted (or never existed): fire nothing, ever


async def fire(
    tx: Tx, reminder_id: str, slot: datetime, now: datetime, *, trace_id: str = ""
) -> Fired:
    """Record one occurrence and append its ``ReminderDue``, in the caller's transaction.

    The deletion check and the insert share the transaction, and the check
    locks the reminder's row until it commits (SQLite: ``BEGIN IMMEDIATE``
    orders it with every delete; PostgreSQL: ``FOR SHARE``, which a delete
    waits for, or which waits for a delete and then reads it), so once a
    deletion has committed no occurrence of that reminder fires anywhere.
    """
    row = await tx.fetchone(
        "SELECT r.owner_id, r.text, r.timezone, r.deleted_at, u.email, u.name"
        " FROM reminders r LEFT JOIN users u ON u.id = r.owner_id WHERE r.id = ?"
        + tx.dialect.row_lock("share", "r"),
        (reminder_id,),
    )
    if row is None or row[3] is not None:
        return Fired.GONE
    event = ReminderDue(
        reminder_id=reminder_id, owner_id=str(row[0]), scheduled_for=slot, text=str(row[1]),
        timezone=str(row[2]), email="" if row[4] is None else str(row[4]),
        name=None if row[5] is None else str(row[5]), event_id=uuid7(), trace_id=trace_id,
    )  # fmt: skip
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
    store: Store, due: Sequence[tuple[str, datetime, str]], now: datetime
) -> list[Fired]:
    """Fire occurrences (reminder id, slot, trace id) in one transaction: one commit, one fsync."""
    async with store.transaction() as tx:
        return [await fire(tx, rid, slot, now, trace_id=trace_id) for rid, slot, trace_id in due]


async def occurrences(store: Store, reminder_id: str) -> list[datetime]:
    """The slots that fired, oldest first."""
    rows = await store.fetchall(
        "SELECT scheduled_for FROM reminder_occurrences WHERE reminder_id = ?"
        " ORDER BY scheduled_for",
        (reminder_id,),
    )
    return [from_db_time(row[0]) for row in rows]
