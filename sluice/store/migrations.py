"""sluice's own schema history, applied in order at start (``sluice.store.migrate``).

Projection tables are written as templates with ``{s}``: the suffix is empty
for the live tables and a generation tag while ``sluice replay`` rebuilds them.
"""

from __future__ import annotations

# Link statistics, pre-aggregated per link; unique visitors are exact: one row
# per (link, visitor) and per (link, day, visitor), counted as they are inserted.
LINK_STATS_DDL = """
CREATE TABLE link_stats{s} (
    code TEXT PRIMARY KEY,
    total INTEGER NOT NULL,
    bots INTEGER NOT NULL,
    unique_visitors INTEGER NOT NULL,
    updated_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE link_stats_days{s} (
    code TEXT NOT NULL,
    day TEXT NOT NULL,
    visits INTEGER NOT NULL,
    unique_visitors INTEGER NOT NULL,
    PRIMARY KEY (code, day)
) WITHOUT ROWID;
CREATE TABLE link_stats_referrers{s} (
    code TEXT NOT NULL,
    referrer TEXT NOT NULL,
    visits INTEGER NOT NULL,
    PRIMARY KEY (code, referrer)
) WITHOUT ROWID;
CREATE TABLE link_stats_browsers{s} (
    code TEXT NOT NULL,
    browser TEXT NOT NULL,
    visits INTEGER NOT NULL,
    PRIMARY KEY (code, browser)
) WITHOUT ROWID;
CREATE TABLE link_visitors{s} (
    code TEXT NOT NULL,
    visitor TEXT NOT NULL,
    PRIMARY KEY (code, visitor)
) WITHOUT ROWID;
CREATE TABLE link_day_visitors{s} (
    code TEXT NOT NULL,
    day TEXT NOT NULL,
    visitor TEXT NOT NULL,
    PRIMARY KEY (code, day, visitor)
) WITHOUT ROWID;
CREATE TABLE link_stats_processed{s} (
    event_id TEXT PRIMARY KEY
) WITHOUT ROWID;
"""

# Link statistics of any UTC day range (SPEC 13), added by migration 24 to the tables
# above, which stay as migration 6 made them (a fresh database runs 6, then 24; a
# replay runs both templates). Per day: the bots; link_day_facets counts visits per
# (day, facet, value), facet one of referrer, browser, country, os, device, value ''
# when unknown; link_owner_days counts each owner's links per day, for the owner's
# busiest links of a range.
LINK_STATS_RANGES_DDL = """
ALTER TABLE link_stats_days{s} ADD COLUMN bots INTEGER NOT NULL DEFAULT 0;
CREATE TABLE link_day_facets{s} (
    code TEXT NOT NULL,
    day TEXT NOT NULL,
    facet TEXT NOT NULL,
    value TEXT NOT NULL,
    visits INTEGER NOT NULL,
    PRIMARY KEY (code, day, facet, value)
) WITHOUT ROWID;
CREATE TABLE link_owner_days{s} (
    owner_id TEXT NOT NULL,
    day TEXT NOT NULL,
    code TEXT NOT NULL,
    visits INTEGER NOT NULL,
    bots INTEGER NOT NULL,
    PRIMARY KEY (owner_id, day, code)
) WITHOUT ROWID;
"""

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
    (
        4,
        "mail idempotency keys",
        """
        CREATE TABLE mail_sends (
            key TEXT PRIMARY KEY,
            state TEXT NOT NULL CHECK (state IN ('reserved', 'sent')),
            holder TEXT NOT NULL,
            lease_until TEXT NOT NULL,
            recipient TEXT NOT NULL,
            reserved_at TEXT NOT NULL,
            sent_at TEXT
        ) WITHOUT ROWID;
        """,
    ),
    (
        5,
        "short links and the code pool",
        """
        CREATE TABLE code_pool (
            code TEXT PRIMARY KEY,
            taken INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        CREATE INDEX code_pool_free ON code_pool (taken) WHERE taken = 0;
        CREATE TABLE links (
            code TEXT PRIMARY KEY,
            owner_id TEXT NOT NULL REFERENCES users (id),
            url TEXT NOT NULL,
            expires_at TEXT,
            disabled INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX links_owner ON links (owner_id, created_at DESC, code);
        """,
    ),
    (6, "link statistics projection", LINK_STATS_DDL.format(s="")),
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
    ),
    (
        8,
        "export jobs",
        # snapshot_seq: the history's head when the export was requested (the CSV covers
        # visits up to it); cursor_seq/cursor_bytes: the checkpoint (last seq scanned, part
        # file length then); attempt: fences a stale runner's checkpoints.
        """
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            owner_id TEXT NOT NULL REFERENCES users (id),
            code TEXT NOT NULL,
            status TEXT NOT NULL
                CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
            progress INTEGER NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
            created_at TEXT NOT NULL,
            started_at TEXT,
            finished_at TEXT,
            error TEXT,
            snapshot_seq INTEGER NOT NULL,
            cursor_seq INTEGER NOT NULL DEFAULT 0,
            cursor_bytes INTEGER NOT NULL DEFAULT 0,
            rows INTEGER NOT NULL DEFAULT 0,
            attempt INTEGER NOT NULL DEFAULT 0,
            resumed_from INTEGER,
            result_path TEXT,
            purged_at TEXT,
            trace_id TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX jobs_active ON jobs (kind, owner_id, code)
            WHERE status IN ('queued', 'running');
        CREATE INDEX jobs_finished ON jobs (finished_at)
            WHERE finished_at IS NOT NULL AND purged_at IS NULL;
        """,
    ),
    (
        9,
        "export jobs given up in the dead letters",
        # 1: failed because its entry went to the dead letters; a redrive resumes it.
        "ALTER TABLE jobs ADD COLUMN dead_lettered INTEGER NOT NULL DEFAULT 0",
    ),
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
    (
        10,
        "export results in the database",
        # The CSV of a job as consecutive byte ranges, each row holding bytes from first_byte
        # on. A rowid table, not WITHOUT ROWID: rows reach 256 KiB, and SQLite advises WITHOUT
        # ROWID only for rows far smaller than a page. jobs.result_path is unused from here
        # on; results written to a data dir before cannot be served from the database, so
        # their jobs count as purged (410; the old files under <data dir>/exports can go).
        """
        CREATE TABLE export_chunks (
            job_id TEXT NOT NULL REFERENCES jobs (id),
            first_byte INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (job_id, first_byte)
        );
        UPDATE jobs SET purged_at = finished_at WHERE status = 'succeeded' AND purged_at IS NULL;
        """,
    ),
    (
        12,
        "verified mail addresses, paused reminders",
        # verified_at: when the user followed the link of a verification mail (NULL: not yet;
        # users from before this release start unverified too); verification_requested_at,
        # verification_requests: the last new link asked for (POST /v1/me/verification, one
        # an hour) and how many were; paused_at: a reminder paused by its mails' one-click
        # unsubscribe does not fire.
        """
        ALTER TABLE users ADD COLUMN verified_at TEXT;
        ALTER TABLE users ADD COLUMN verification_requested_at TEXT;
        ALTER TABLE users ADD COLUMN verification_requests INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE reminders ADD COLUMN paused_at TEXT;
        """,
    ),
    (
        13,
        "reminders' next runs, computed once",
        # A run of consecutive occurrences after computed_after (runs: db_time instants,
        # space-separated) for the cron and zone named; complete: none follows the last.
        # Listing reminders reads these instead of walking rare crons per request.
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
    ),
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
        # sluice/streams/deliveries.py. Rows come in batches, in the order they
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
    (
        18,
        "export jobs can be cancelled",
        # DELETE /v1/jobs/{id} (sluice/builtin/links/exports/jobs.py, cancel): status gains
        # 'cancelled'.
        # A column's CHECK cannot be altered in SQLite, so the column is replaced by one
        # with the wider CHECK (ADD, copy, DROP, RENAME: the same words in SQLite and
        # PostgreSQL, and no table rebuild, which export_chunks' foreign key would
        # forbid); the partial index on it goes first and comes back.
        """
        DROP INDEX jobs_active;
        ALTER TABLE jobs ADD COLUMN status_new TEXT NOT NULL DEFAULT 'queued'
            CHECK (status_new IN ('queued', 'running', 'succeeded', 'failed', 'cancelled'));
        UPDATE jobs SET status_new = status;
        ALTER TABLE jobs DROP COLUMN status;
        ALTER TABLE jobs RENAME COLUMN status_new TO status;
        CREATE UNIQUE INDEX jobs_active ON jobs (kind, owner_id, code)
            WHERE status IN ('queued', 'running');
        """,
    ),
    (
        17,
        "paused handler groups",
        # sluice/streams/pause.py: a row per paused group, read by every worker process
        # every half second; the database, not Redis, so a pause survives every restart.
        """
        CREATE TABLE paused_groups (
            name TEXT PRIMARY KEY,
            paused_at TEXT NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    (
        21,
        "webhooks, their messages and delivery attempts",
        # sluice/builtin/links/webhooks/repository.py. The secret is kept to sign (shown once by the
        # API). A message is one call's body and webhook-id, stable across retries;
        # webhook_message_events names the message carrying each event to each webhook,
        # so a retried entry resends only what was not delivered. Attempts: the last
        # 200 per webhook are kept (rows in id order, the index reads them newest first).
        """
        CREATE TABLE webhooks (
            id TEXT PRIMARY KEY,
            owner_id TEXT NOT NULL REFERENCES users (id),
            url TEXT NOT NULL,
            events TEXT NOT NULL,
            secret TEXT NOT NULL,
            created_at TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX webhooks_owner ON webhooks (owner_id, created_at);
        CREATE TABLE webhook_messages (
            id TEXT PRIMARY KEY,
            webhook_id TEXT NOT NULL,
            event_type TEXT NOT NULL,
            body BLOB NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            delivered_at TEXT
        ) WITHOUT ROWID;
        CREATE INDEX webhook_messages_hook ON webhook_messages (webhook_id);
        CREATE INDEX webhook_messages_created ON webhook_messages (created_at);
        CREATE TABLE webhook_message_events (
            webhook_id TEXT NOT NULL,
            event_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (webhook_id, event_id)
        ) WITHOUT ROWID;
        CREATE INDEX webhook_message_events_created ON webhook_message_events (created_at);
        CREATE TABLE webhook_deliveries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            webhook_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            event_type TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            status INTEGER,
            error TEXT,
            started_at TEXT NOT NULL,
            duration_ms REAL NOT NULL
        );
        CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, id);
        """,
    ),
    (
        20,
        "link imports",
        # sluice/builtin/links/imports/jobs.py. An uploaded CSV waits here for its job (kind
        # 'import' in
        # jobs), so a worker on any host runs it, with the rows of each outcome so far;
        # deleted when the job ends. import_keys: every link an import created, by owner
        # and SHA-256 of its URL, so importing a file again creates nothing twice.
        """
        CREATE TABLE import_uploads (
            job_id TEXT PRIMARY KEY REFERENCES jobs (id),
            format TEXT NOT NULL,
            data BLOB NOT NULL,
            created INTEGER NOT NULL DEFAULT 0,
            existing INTEGER NOT NULL DEFAULT 0,
            invalid INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL
        );
        CREATE TABLE import_keys (
            owner_id TEXT NOT NULL,
            url_key TEXT NOT NULL,
            code TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (owner_id, url_key)
        ) WITHOUT ROWID;
        """,
    ),
    (
        19,
        "link fields: visit limit, valid since, redirect status, tags, title",
        # SPEC 13 (issue 18), sluice/builtin/links/repository.py. Each field is a column of
        # links (the redirect reads one row); rules and password come later as columns
        # of their own. Tags are also in link_tags, with the owner and creation time
        # copied, so GET /v1/links?tag= pages through one index range newest first.
        # link_visit_counts: GET redirects served of links with max_visits, committed with
        # their visits; the count a lost Redis counter starts from (sluice/builtin/links/limits.py).
        """
        ALTER TABLE links ADD COLUMN max_visits INTEGER;
        ALTER TABLE links ADD COLUMN valid_since TEXT;
        ALTER TABLE links ADD COLUMN redirect_status INTEGER NOT NULL DEFAULT 302
            CHECK (redirect_status IN (301, 302, 307, 308));
        ALTER TABLE links ADD COLUMN tags TEXT NOT NULL DEFAULT '';
        ALTER TABLE links ADD COLUMN title TEXT;
        CREATE TABLE link_tags (
            code TEXT NOT NULL,
            tag TEXT NOT NULL,
            owner_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (code, tag)
        ) WITHOUT ROWID;
        CREATE INDEX link_tags_owner ON link_tags (owner_id, tag, created_at DESC, code);
        CREATE TABLE link_visit_counts (
            code TEXT PRIMARY KEY,
            visits INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    (
        22,
        "link redirect rules",
        # SPEC 13 rules (issue 18): the JSON list of sluice/builtin/links/rule_shapes.py's Rule,
        # NULL for none; read with the link's row, so a redirect reads nothing more.
        """
        ALTER TABLE links ADD COLUMN rules TEXT;
        """,
    ),
    (
        25,
        "orphan visits",
        # SPEC 13 orphan visits: GETs of codes no link has, per UTC day ('YYYY-MM-DD').
        # A day keeps at most SLUICE_ORPHAN_CODES_PER_DAY code rows; `other` counts the
        # visits of codes beyond them (sluice/builtin/links/orphans.py).
        """
        CREATE TABLE orphan_visit_days (
            day TEXT PRIMARY KEY,
            visits INTEGER NOT NULL,
            other INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE orphan_visit_codes (
            day TEXT NOT NULL,
            code TEXT NOT NULL,
            visits INTEGER NOT NULL,
            PRIMARY KEY (day, code)
        ) WITHOUT ROWID;
        """,
    ),
    (
        24,
        "link statistics of any day range",
        # SPEC 13 (sluice/builtin/links/stats/projection.py). The new rows start empty for the
        # visits before it: `sluice replay link-stats` fills them from the history.
        LINK_STATS_RANGES_DDL.format(s=""),
    ),
    (
        23,
        "link passwords",
        # SPEC 13 password (sluice/builtin/links/http/link_passwords.py): the scrypt hash of the
        # link's
        # password (sluice/passwords.py's format), NULL for none. Read with the link's
        # row; never in an event (they carry has_password), a response or an export.
        """
        ALTER TABLE links ADD COLUMN password_hash TEXT;
        """,
    ),
    (
        26,
        "one-shot reminders, reminder edits",
        # SPEC 14 (sluice/scheduler/one_shots.py). at: a one-shot's instant (NULL for
        # a
        # cron reminder, whose cron and timezone a one-shot leaves ''); due_at: set while
        # a one-shot is pending (not fired, paused or deleted), NULL otherwise, so the
        # partial index holds the pending ones only and schedulers read "due <= now"
        # from it; done_at: when it fired. rescheduled_at: the last PATCH of the
        # schedule (or resume), before which no occurrence of the new schedule fires.
        """
        ALTER TABLE reminders ADD COLUMN at TEXT;
        ALTER TABLE reminders ADD COLUMN due_at TEXT;
        ALTER TABLE reminders ADD COLUMN done_at TEXT;
        ALTER TABLE reminders ADD COLUMN rescheduled_at TEXT;
        CREATE INDEX reminders_due ON reminders (due_at, id) WHERE due_at IS NOT NULL;
        """,
    ),
    (
        27,
        "task scheduling policies: skipped and cancelled runs, catch-up, backfill, pauses",
        # SPEC 14 (sluice/scheduler/policy.py, overlap.py, pauses.py). status gains
        # 'cancelled' and 'skipped', trigger 'catchup' and 'backfill': the columns are
        # replaced as in migration 18 (a CHECK cannot be altered in SQLite). One run per
        # occurrence, whatever triggered it (cron, catch-up, backfill); a skipped record
        # does not count, so a backfill can still run an occurrence that was skipped.
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
        # sluice/streams/delivery_batches.py. entries: msgpack (zlib) of (event_id,
        # stream, entry_id, attempt) per handled entry; the id is drawn by the writing process, in
        # time order. No index but the key: a batch is found through a processed row's
        # batch_id, and the purge goes by id as for deliveries.
        """
        CREATE TABLE delivery_batches (
            id INTEGER PRIMARY KEY,
            group_name TEXT NOT NULL,
            consumer TEXT NOT NULL,
            started_at TEXT NOT NULL,
            duration_ms REAL NOT NULL,
            entries BLOB NOT NULL
        );
        ALTER TABLE link_stats_processed ADD COLUMN batch_id INTEGER;
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
]
