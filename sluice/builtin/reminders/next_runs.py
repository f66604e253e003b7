"""Each reminder's upcoming occurrences as computed when it was created.

A row holds a run of consecutive occurrences after ``computed_after`` for the
reminder's cron and zone at that time (both kept, so a row that no longer
matches its reminder is ignored rather than believed). Listing reminders reads
these instead of walking each cron again: a rare schedule's row stays good for
decades. The rows are a cache of what the cron says; losing one costs a
computation, never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sluice.app import Row, Store, Tx, db_time, from_db_time


@dataclass(frozen=True, slots=True)
class StoredRuns:
    cron: str
    timezone: str
    after: datetime
    runs: tuple[datetime, ...]
    complete: bool  # the schedule has no occurrence after the last of ``runs``


async def save(tx: Tx, reminder_id: str, stored: StoredRuns) -> None:
    await tx.execute(
        "INSERT INTO reminder_next_runs (reminder_id, cron, timezone, computed_after, runs,"
        " complete) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (reminder_id) DO UPDATE SET"
        " cron = excluded.cron, timezone = excluded.timezone,"
        " computed_after = excluded.computed_after, runs = excluded.runs,"
        " complete = excluded.complete",
        (
            reminder_id,
            stored.cron,
            stored.timezone,
            db_time(stored.after),
            " ".join(db_time(run) for run in stored.runs),
            int(stored.complete),
        ),
    )


async def load(store: Store, reminder_ids: Sequence[str]) -> dict[str, StoredRuns]:
    """The stored runs of those reminders that have them."""
    if not reminder_ids:
        return {}
    marks = ", ".join("?" * len(reminder_ids))
    rows = await store.fetchall(
        "SELECT reminder_id, cron, timezone, computed_after, runs, complete"
        f" FROM reminder_next_runs WHERE reminder_id IN ({marks})",
        tuple(reminder_ids),
    )
    return {str(row[0]): _stored(row) for row in rows}


def _stored(row: Row) -> StoredRuns:
    return StoredRuns(
        cron=str(row[1]),
        timezone=str(row[2]),
        after=from_db_time(row[3]),
        runs=tuple(from_db_time(text) for text in str(row[4]).split()),
        complete=bool(row[5]),
    )
