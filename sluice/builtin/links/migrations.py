"""The links app's schema history: the code pool and links (with their fields, tags,
rules and passwords), export jobs and their results, imports, webhooks and orphan visits.
Steps 2, 12 and 14 (release 3) made the ``link-stats`` projection's tables, which the
projection's own schema steps make now (``sluice.builtin.links.stats.projection``, whose
steps name them in ``replaces_migrations``); their numbers are not used again.

Each step made these tables as one of sluice's own migrations did before the app held
them, and names that version in ``replaces``: a database made by an earlier release has
the tables and records the step as done; a new one runs it. Steps run in the order the
core's did (sluice/store/migrations.py says which of its versions each replaces).
"""

from __future__ import annotations

from sluice.builtin.links.app import app

app.migration(
    1,
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
    replaces=(5,),
)

# snapshot_seq: the history's head when the export was requested (the CSV covers
# visits up to it); cursor_seq/cursor_bytes: the checkpoint (last seq scanned, part
# file length then); attempt: fences a stale runner's checkpoints.
app.migration(
    3,
    "export jobs",
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
    replaces=(8,),
)

# 1: failed because its entry went to the dead letters; a redrive resumes it.
app.migration(
    4,
    "export jobs given up in the dead letters",
    "ALTER TABLE jobs ADD COLUMN dead_lettered INTEGER NOT NULL DEFAULT 0",
    replaces=(9,),
)

# The CSV of a job as consecutive byte ranges, each row holding bytes from first_byte
# on. A rowid table, not WITHOUT ROWID: rows reach 256 KiB, and SQLite advises WITHOUT
# ROWID only for rows far smaller than a page. jobs.result_path is unused from here
# on; results written to a data dir before cannot be served from the database, so
# their jobs count as purged (410; the old files under <data dir>/exports can go).
app.migration(
    5,
    "export results in the database",
    """
    CREATE TABLE export_chunks (
        job_id TEXT NOT NULL REFERENCES jobs (id),
        first_byte INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (job_id, first_byte)
    );
    UPDATE jobs SET purged_at = finished_at WHERE status = 'succeeded' AND purged_at IS NULL;
    """,
    replaces=(10,),
)

# DELETE /v1/jobs/{id} (sluice/builtin/links/exports/jobs.py, cancel): status gains
# 'cancelled'. A column's CHECK cannot be altered in SQLite, so the column is replaced by one
# with the wider CHECK (ADD, copy, DROP, RENAME: the same words in SQLite and
# PostgreSQL, and no table rebuild, which export_chunks' foreign key would
# forbid); the partial index on it goes first and comes back.
app.migration(
    6,
    "export jobs can be cancelled",
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
    replaces=(18,),
)

# docs/guides/links.md (issue 18), sluice/builtin/links/repository.py. Each field is a column of
# links (the redirect reads one row); rules and password come later as columns
# of their own. Tags are also in link_tags, with the owner and creation time
# copied, so GET /v1/links?tag= pages through one index range newest first.
# link_visit_counts: GET redirects served of links with max_visits, committed with
# their visits; the count a lost Redis counter starts from (sluice/builtin/links/limits.py).
app.migration(
    7,
    "link fields: visit limit, valid since, redirect status, tags, title",
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
    replaces=(19,),
)

# sluice/builtin/links/imports/jobs.py. An uploaded CSV waits here for its job (kind
# 'import' in jobs), so a worker on any host runs it, with the rows of each outcome so
# far; deleted when the job ends. import_keys: every link an import created, by owner
# and SHA-256 of its URL, so importing a file again creates nothing twice.
app.migration(
    8,
    "link imports",
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
    replaces=(20,),
)

# sluice/builtin/links/webhooks/repository.py. The secret is kept to sign (shown once by the
# API). A message is one call's body and webhook-id, stable across retries;
# webhook_message_events names the message carrying each event to each webhook,
# so a retried entry resends only what was not delivered. Attempts: the last
# 200 per webhook are kept (rows in id order, the index reads them newest first).
app.migration(
    9,
    "webhooks, their messages and delivery attempts",
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
    replaces=(21,),
)

# docs/guides/links.md rules (issue 18): the JSON list of sluice/builtin/links/rule_shapes.py's
# Rule, NULL for none; read with the link's row, so a redirect reads nothing more.
app.migration(
    10,
    "link redirect rules",
    """
    ALTER TABLE links ADD COLUMN rules TEXT;
    """,
    replaces=(22,),
)

# docs/guides/links.md password (sluice/builtin/links/http/link_passwords.py): the scrypt hash of
# the link's password (sluice/security/passwords.py's format), NULL for none. Read with the link's
# row; never
# in an event (they carry has_password), a response or an export.
app.migration(
    11,
    "link passwords",
    """
    ALTER TABLE links ADD COLUMN password_hash TEXT;
    """,
    replaces=(23,),
)

# docs/guides/links.md orphan visits: GETs of codes no link has, per UTC day ('YYYY-MM-DD').
# A day keeps at most SLUICE_ORPHAN_CODES_PER_DAY code rows; `other` counts the
# visits of codes beyond them (sluice/builtin/links/orphans.py).
app.migration(
    13,
    "orphan visits",
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
    replaces=(25,),
)
