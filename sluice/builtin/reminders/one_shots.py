"""One-shot reminders as stored: read by due time, claimed and fired by one UPDATE.

A pending one-shot (not fired, paused or deleted) has ``due_at`` set to its
instant; every other reminder row has it NULL, so the partial index
``reminders_due (due_at, id) WHERE due_at IS NOT NULL`` holds the pending ones
only, however many have fired. A scheduler asks it two things, each an index
seek that reads a handful of rows whatever the table holds:

- ``next_due``: the earliest pending instant (to know how long to sleep);
- ``fire_due``: one transaction that claims up to ``limit`` due rows with a
  conditional ``UPDATE ... SET due_at = NULL ... WHERE due_at <= now
  RETURNING``, records their occurrence rows and appends their ``ReminderDue``.

The UPDATE is the claim: a row whose ``due_at`` another transaction has already
cleared no longer matches, so each one-shot fires once however many schedulers
ask at once (SQLite: write transactions are serial; PostgreSQL: the subquery
locks its rows ``FOR UPDATE SKIP LOCKED``, so two replicas take different
rows, and the outer condition is checked again on the row as committed).
Deleting, pausing or moving a one-shot updates the same row, so it is ordered
with the claim: once that commits, the old instant fires nowhere.
"""

from __future__ import annotations

from datetime import datetime

from sluice.app import Store, db_time, from_db_time, new_trace_id, uuid7
from sluice.app.advanced import Due
from sluice.builtin.reminders.events import ReminderDue

# One-shots carry no zone; their mail shows the instant in UTC.
ONE_SHOT_ZONE = "UTC"


async def next_due(store: Store) -> datetime | None:
    """The earliest pending one-shot's instant, None when none is pending."""
    row = await store.fetchone(
        "SELECT due_at FROM reminders WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1"
    )
    return None if row is None else from_db_time(row[0])


async def fire_due(store: Store, now: datetime, limit: int) -> list[ReminderDue]:
    """Claim and fire up to ``limit`` one-shots due at ``now``, earliest first, in one
    transaction; the ``ReminderDue`` of each (empty when another replica took them)."""
    async with store.transaction() as tx:
        due = db_time(now)
        # IN, not a join with the picked ids: PostgreSQL then looks each one up by key (a
        # join ran the locking subquery once per row of a scan: seconds, not milliseconds).
        rows = await tx.fetchall(
            "UPDATE reminders SET due_at = NULL, done_at = ? WHERE id IN ("
            " SELECT id FROM reminders WHERE due_at IS NOT NULL AND due_at <= ?"
            " ORDER BY due_at LIMIT ?" + tx.dialect.row_lock("update", skip_locked=True) + ")"
            " AND due_at IS NOT NULL AND due_at <= ? AND deleted_at IS NULL"
            " AND paused_at IS NULL RETURNING id, owner_id, text, at",
            (due, due, limit, due),
        )
        if not rows:
            return []
        owners = sorted({str(row[1]) for row in rows})
        users = {
            str(u[0]): u
            for u in await tx.fetchall(
                f"SELECT id, email, name FROM users WHERE id IN ({', '.join('?' * len(owners))})",
                owners,
            )
        }
        fired = []
        for reminder_id, owner_id, text, at in sorted(rows, key=lambda r: (str(r[3]), str(r[0]))):
            user = users.get(str(owner_id))
            fired.append(
                ReminderDue(
                    reminder_id=str(reminder_id),
                    owner_id=str(owner_id),
                    text=str(text),
                    scheduled_for=from_db_time(at),
                    timezone=ONE_SHOT_ZONE,
                    email="" if user is None else str(user[1]),
                    name=None if user is None or user[2] is None else str(user[2]),
                    event_id=uuid7(),
                    trace_id=new_trace_id(),
                )
            )
        # The same record as a cron occurrence's (purged after 7 days like them); the
        # UPDATE above already made this the only firing, so a conflict cannot happen.
        await tx.executemany(
            "INSERT INTO reminder_occurrences (reminder_id, scheduled_for, event_id, fired_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(e.reminder_id, db_time(e.scheduled_for), e.event_id, due) for e in fired],
        )
        await tx.append(*fired)
    return fired


# What the scheduler's one-shot runner fires for this app (``sluice.scheduler.one_shots``).
DUE = Due("one-shot reminders", next_due, fire_due)
