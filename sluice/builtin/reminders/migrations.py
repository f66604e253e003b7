"""The reminders app's schema history: reminders (recurring and one-shot, their pauses and
edits), their occurrences and their next runs.

Each step names in ``replaces`` the version of sluice's own history that made its part
before the app held it: a database made by an earlier release has it and records the
step as done; a new one runs it. ``reminders`` refers to ``users``, the core's.
"""

from __future__ import annotations

from sluice.builtin.reminders.app import app

# A user's reminders (sluice/builtin/reminders/stored.py) and each occurrence fired, one
# row per (reminder, slot) so no slot fires twice (sluice/builtin/reminders/cron_runner.py).
app.migration(
    1,
    "reminders and their occurrences",
    """
    CREATE TABLE reminders (
        id TEXT PRIMARY KEY,
        owner_id TEXT NOT NULL REFERENCES users (id),
        cron TEXT NOT NULL,
        timezone TEXT NOT NULL,
        text TEXT NOT NULL,
        created_at TEXT NOT NULL,
        deleted_at TEXT
    ) WITHOUT ROWID;
    CREATE INDEX reminders_owner ON reminders (owner_id, id DESC);
    CREATE TABLE reminder_occurrences (
        reminder_id TEXT NOT NULL,
        scheduled_for TEXT NOT NULL,
        event_id TEXT NOT NULL,
        fired_at TEXT NOT NULL,
        PRIMARY KEY (reminder_id, scheduled_for)
    ) WITHOUT ROWID;
    """,
    replaces=(7,),
)

# paused_at: a reminder paused by its mails' one-click unsubscribe does not fire.
app.migration(
    2,
    "paused reminders",
    """
    ALTER TABLE reminders ADD COLUMN paused_at TEXT;
    """,
    replaces=(12,),
)

# A run of consecutive occurrences after computed_after (runs: db_time instants,
# space-separated) for the cron and zone named; complete: none follows the last.
# Listing reminders reads these instead of walking rare crons per request.
app.migration(
    3,
    "reminders' next runs, computed once",
    """
    CREATE TABLE reminder_next_runs (
        reminder_id TEXT PRIMARY KEY REFERENCES reminders (id),
        cron TEXT NOT NULL,
        timezone TEXT NOT NULL,
        computed_after TEXT NOT NULL,
        runs TEXT NOT NULL,
        complete INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    replaces=(13,),
)

# docs/guides/tasks.md (sluice/builtin/reminders/one_shots.py, run by
# sluice/scheduler/one_shots.py). at: a one-shot's instant (NULL for a cron reminder, whose cron and
# timezone a one-shot leaves ''); due_at: set while a one-shot is pending (not fired, paused or
# deleted), NULL otherwise, so the partial index holds the pending ones only and schedulers read
# "due <= now" from it; done_at: when it fired. rescheduled_at: the last PATCH of the schedule (or
# resume), before which no occurrence of the new schedule fires.
app.migration(
    4,
    "one-shot reminders, reminder edits",
    """
    ALTER TABLE reminders ADD COLUMN at TEXT;
    ALTER TABLE reminders ADD COLUMN due_at TEXT;
    ALTER TABLE reminders ADD COLUMN done_at TEXT;
    ALTER TABLE reminders ADD COLUMN rescheduled_at TEXT;
    CREATE INDEX reminders_due ON reminders (due_at, id) WHERE due_at IS NOT NULL;
    """,
    replaces=(26,),
)
