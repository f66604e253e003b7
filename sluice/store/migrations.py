"""sluice's own schema history: the tables of the core, applied in order at start
(``sluice.store.migrate``), recorded in ``schema_migrations``.

The core owns what the engine and the core's modules read and write: the event history
and the outbox positions, users and tokens (``sluice.store.users``, read by every app's
``require_user``), the secrets hosts share, the scheduler's task runs and pauses, history
segments, the event search indexes, deliveries and delivery batches, paused handler
groups, delayed jobs (and the fired ones their groups have yet to run) and the events
handled once per group.

Each built-in app owns the steps of its own tables, declared on its ``App`` in
``sluice/builtin/<app>/migrations.py`` (the articles app through its projection and
task). A table that moved out of here keeps its history: the step that made it here
stays, with its number and name, without the moved part (empty if nothing is left, as
2, 4, 5, ...), and the app's step holding that part names it in ``replaces``, so a
database that had it applied records the app's step as done and a new one runs it.
"""

from __future__ import annotations

# The versions above whose tables (all or some) moved into the built-in apps: each is
# replaced by an app step. A database that runs one of them now runs it without those
# tables, and the engine records that (``sluice.store.migrate``), so the app's step runs
# whenever the app is first loaded, even long after. A test holds this set to the
# ``replaces`` of the built-in apps' steps.
MOVED_OUT: frozenset[int] = frozenset(
    {2, 4, 5, 6, 7, 8, 9, 10, 12, 13, 18, 19, 20, 21, 22, 23, 24, 25, 26, 28}
)

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "event history, outbox positions",
        """
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL UNIQUE,
            type TEXT NOT NULL,
            aggregate TEXT NOT NULL,
            payload BLOB NOT NULL,
            trace_id TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE positions (
            name TEXT PRIMARY KEY,
            seq INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    # The article views projection's tables: the articles app's since it moved there
    # (sluice/builtin/articles: its steps replace 2, 7's leaderboard_snapshots and 28's
    # batch_id, which a database made before then has and a new one gets from the app).
    (2, "article views projection (moved to the articles app)", ""),
    (
        3,
        "users and tokens",
        """
        CREATE TABLE users (
            id TEXT PRIMARY KEY,
            email TEXT NOT NULL,
            email_key TEXT NOT NULL UNIQUE,
            name TEXT,
            password_hash TEXT NOT NULL,
            created_at TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE tokens (
            token_hash TEXT PRIMARY KEY,
            user_id TEXT NOT NULL REFERENCES users (id),
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX tokens_user ON tokens (user_id);
        """,
    ),
    # Emptied steps: their tables are an app's, made by the app's step that replaces
    # the version (sluice/builtin/<app>/migrations.py), named after each line.
    (4, "mail idempotency keys", ""),  # accounts 1: mail_sends
    (5, "short links and the code pool", ""),  # links 1: code_pool, links
    (6, "link statistics projection", ""),  # links 2: link_stats and the tables beside it
    # The leaderboard snapshots are the articles app's (its step 1), reminders and their
    # occurrences the reminders app's (its step 1); both replace 7.
    (
        7,
        "scheduler: task runs, leaderboard snapshots, reminders",
        """
        CREATE TABLE task_runs (
            id TEXT PRIMARY KEY,
            task TEXT NOT NULL,
            trigger TEXT NOT NULL CHECK (trigger IN ('cron', 'manual')),
            status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
            scheduled_for TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            cursor TEXT,
            error TEXT,
            trace_id TEXT NOT NULL,
            holder TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX task_runs_occurrence ON task_runs (task, scheduled_for)
            WHERE trigger = 'cron';
        CREATE INDEX task_runs_newest ON task_runs (task, id DESC);
        """,
    ),
    (8, "export jobs", ""),  # links 3: jobs
    (9, "export jobs given up in the dead letters", ""),  # links 4: jobs.dead_lettered
    (
        11,
        "secrets every host shares",
        # visitor-key: the key of visitor hashes; admin-token-sha256: the generated admin token's
        # hash. Hosts share only the database, so secrets they must agree on live here.
        """
        CREATE TABLE secrets (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            created_at TEXT NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    (10, "export results in the database", ""),  # links 5: export_chunks
    (
        12,
        "verified mail addresses, paused reminders",
        # verified_at: when the user followed the link of a verification mail (NULL: not yet;
        # users from before this release start unverified too); sluice.store.users reads
        # it. The step's other columns are the apps': the verification requests the
        # accounts app's (its step 2), reminders.paused_at the reminders app's (its step 2).
        """
        ALTER TABLE users ADD COLUMN verified_at TEXT;
        """,
    ),
    (13, "reminders' next runs, computed once", ""),  # reminders 3: reminder_next_runs
    (
        14,
        "history segments: archived events",
        # One row per archive segment (sluice/history): the published events of one
        # aggregate from first_seq to last_seq, moved out of events in the transaction
        # that inserted the row. types: JSON {type: count}; bytes: the size of data.
        # In the database, not in files, so every host reads them and copy-store copies them.
        """
        CREATE TABLE history_segments (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            aggregate TEXT NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            first_at TEXT NOT NULL,
            last_at TEXT NOT NULL,
            events INTEGER NOT NULL,
            types TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            data BLOB NOT NULL
        );
        CREATE UNIQUE INDEX history_segments_first_seq ON history_segments (first_seq);
        CREATE INDEX history_segments_aggregate ON history_segments (aggregate, first_seq);
        """,
    ),
    (
        15,
        "event search: indexes by type and by trace id, in page order",
        # sluice/history/search.py: newest first by (created_at, seq). Two
        # indexes, each going on with those two columns: a type's or a trace's events
        # are one index range read in page order; an aggregate (its types) and no
        # filter at all are the ranges of several types merged. Every index is paid on
        # every append, hence no index per aggregate or for time alone. seq is spelled
        # out for PostgreSQL (SQLite's rowid would be implied).
        """
        CREATE INDEX events_type ON events (type, created_at, seq);
        CREATE INDEX events_trace ON events (trace_id, created_at, seq);
        """,
    ),
    (
        16,
        "deliveries: every attempt of every group on every event",
        # sluice/records/deliveries.py. Rows come in batches, in the order they
        # happened, so ``id`` order is time order: the purge deletes from the low ids
        # and needs no index on time. One index, by event, for the event's and the
        # trace's deliveries; every index is paid by every recorded delivery.
        """
        CREATE TABLE deliveries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL,
            group_name TEXT NOT NULL,
            consumer TEXT NOT NULL,
            stream TEXT NOT NULL,
            entry_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            outcome TEXT NOT NULL,
            error TEXT,
            started_at TEXT NOT NULL,
            duration_ms REAL NOT NULL
        );
        CREATE INDEX deliveries_event ON deliveries (event_id);
        """,
    ),
    (18, "export jobs can be cancelled", ""),  # links 6: jobs.status
    (
        17,
        "paused handler groups",
        # sluice/records/pause.py: a row per paused group, read by every worker process
        # every half second; the database, not Redis, so a pause survives every restart.
        """
        CREATE TABLE paused_groups (
            name TEXT PRIMARY KEY,
            paused_at TEXT NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    (21, "webhooks, their messages and delivery attempts", ""),  # links 9: webhook*
    (20, "link imports", ""),  # links 8: import_uploads, import_keys
    (19, "link fields: visit limit, valid since, redirect status, tags, title", ""),  # links 7
    (22, "link redirect rules", ""),  # links 10: links.rules
    (25, "orphan visits", ""),  # links 13: orphan_visit_days, orphan_visit_codes
    (24, "link statistics of any day range", ""),  # links 12: link_day_facets, ...
    (23, "link passwords", ""),  # links 11: links.password_hash
    (26, "one-shot reminders, reminder edits", ""),  # reminders 4: reminders' columns
    (
        27,
        "task scheduling policies: skipped and cancelled runs, catch-up, backfill, pauses",
        # docs/guides/tasks.md (sluice/scheduler/policy.py, overlap.py, pauses.py). status gains
        # 'cancelled' and 'skipped', trigger 'catchup' and 'backfill': the columns are
        # replaced as migration 18 did jobs.status (a CHECK cannot be altered in
        # SQLite). One run per occurrence, whatever triggered it (cron, catch-up,
        # backfill); a skipped record does not count, so a backfill can still run an
        # occurrence that was skipped.
        """
        DROP INDEX task_runs_occurrence;
        ALTER TABLE task_runs ADD COLUMN trigger_new TEXT NOT NULL DEFAULT 'cron'
            CHECK (trigger_new IN ('cron', 'manual', 'catchup', 'backfill'));
        UPDATE task_runs SET trigger_new = trigger;
        ALTER TABLE task_runs DROP COLUMN trigger;
        ALTER TABLE task_runs RENAME COLUMN trigger_new TO trigger;
        ALTER TABLE task_runs ADD COLUMN status_new TEXT NOT NULL DEFAULT 'running'
            CHECK (status_new IN ('running', 'succeeded', 'failed', 'cancelled', 'skipped'));
        UPDATE task_runs SET status_new = status;
        ALTER TABLE task_runs DROP COLUMN status;
        ALTER TABLE task_runs RENAME COLUMN status_new TO status;
        CREATE UNIQUE INDEX task_runs_occurrence ON task_runs (task, scheduled_for)
            WHERE trigger != 'manual' AND status != 'skipped';
        CREATE INDEX task_runs_running ON task_runs (task) WHERE status = 'running';
        CREATE TABLE paused_tasks (
            name TEXT PRIMARY KEY,
            paused_at TEXT NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    (
        28,
        "a projection batch's handled attempts in one row, named by its processed rows",
        # sluice/records/delivery_batches.py. entries: msgpack (zlib) of (event_id,
        # stream, entry_id, attempt) per handled entry; the id is drawn by the writing process, in
        # time order. No index but the key: a batch is found through a processed row's
        # batch_id, and the purge goes by id as for deliveries. The processed rows' batch_id
        # columns are the apps' (link_stats_processed: the links app's step 14).
        """
        CREATE TABLE delivery_batches (
            id INTEGER PRIMARY KEY,
            group_name TEXT NOT NULL,
            consumer TEXT NOT NULL,
            started_at TEXT NOT NULL,
            duration_ms REAL NOT NULL,
            entries BLOB NOT NULL
        );
        """,
    ),
    (
        29,
        "apps: delayed jobs, events handled once per group",
        # sluice/app/jobs.py: one pending job per name and key, found by due time;
        # sluice/app/running.py: a group's record of the events its once-handlers
        # applied, written in the handler's transaction.
        """
        CREATE TABLE delayed_jobs (
            job TEXT NOT NULL,
            key TEXT NOT NULL,
            due_at TEXT NOT NULL,
            payload BLOB NOT NULL,
            trace_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (job, key)
        ) WITHOUT ROWID;
        CREATE INDEX delayed_jobs_due ON delayed_jobs (due_at);
        CREATE TABLE handled_events (
            group_name TEXT NOT NULL,
            event_id TEXT NOT NULL,
            handled_at TEXT NOT NULL,
            PRIMARY KEY (group_name, event_id)
        ) WITHOUT ROWID;
        CREATE INDEX handled_events_at ON handled_events (handled_at);
        """,
    ),
    (
        30,
        "event-sourced aggregates: versions and snapshots",
        # sluice/app/aggregates.py: each event an aggregate saved, at its version (the
        # key is the optimistic concurrency check; the index finds an event's version
        # for /admin); each aggregate's newest snapshot.
        """
        CREATE TABLE aggregate_events (
            aggregate TEXT NOT NULL,
            aggregate_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            event_id TEXT NOT NULL,
            PRIMARY KEY (aggregate, aggregate_id, version)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX aggregate_events_event ON aggregate_events (event_id);
        CREATE TABLE aggregate_snapshots (
            aggregate TEXT NOT NULL,
            aggregate_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            state_version INTEGER NOT NULL,
            schema TEXT NOT NULL,
            state BLOB NOT NULL,
            PRIMARY KEY (aggregate, aggregate_id)
        ) WITHOUT ROWID;
        """,
    ),
    (
        31,
        "delayed jobs: priorities, debounce, the fired jobs each group has yet to run",
        # sluice/app/job_flow.py. A pending job's priority (5, the default level, for a row
        # an older release wrote) and when its key was first scheduled (NULL: an older
        # release's row, its created_at stands in); the lane index finds each job's due
        # rows of one priority, earliest first. job_slots: one row per fired job its group
        # has not run yet, deleted by the run (or its dead letter); what the firing counts.
        """
        ALTER TABLE delayed_jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 5;
        ALTER TABLE delayed_jobs ADD COLUMN first_at TEXT;
        CREATE INDEX delayed_jobs_lane ON delayed_jobs (job, priority, due_at);
        CREATE TABLE job_slots (
            event_id TEXT PRIMARY KEY,
            group_name TEXT NOT NULL,
            fired_at TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX job_slots_fired ON job_slots (fired_at);
        """,
    ),
    (
        32,
        "the W3C traceparent of each event's and each delayed job's span",
        # sluice/telemetry/tracing.py, docs/guides/tracing.md: the span (a request's, a
        # handler's) that appended the event, carried by the relay onto the stream entry so
        # its handlers' spans are children of it; the span that scheduled a job, given to
        # the JobDue event it fires. NULL when tracing is off.
        """
        ALTER TABLE events ADD COLUMN traceparent TEXT;
        ALTER TABLE delayed_jobs ADD COLUMN traceparent TEXT;
        """,
    ),
]
