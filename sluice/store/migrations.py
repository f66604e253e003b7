"""Versioned schema migrations, applied in order at start.

Projection tables are written as templates with ``{s}``: the suffix is empty
for the live tables and a generation tag while ``sluice replay`` rebuilds them.
"""

from __future__ import annotations

ARTICLE_VIEWS_DDL = """
CREATE TABLE article_views{s} (
    article_id TEXT PRIMARY KEY,
    views INTEGER NOT NULL,
    updated_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE article_view_periods{s} (
    period TEXT NOT NULL,
    start TEXT NOT NULL,
    article_id TEXT NOT NULL,
    views INTEGER NOT NULL,
    PRIMARY KEY (period, start, article_id)
) WITHOUT ROWID;
CREATE INDEX article_view_periods_rank{s} ON article_view_periods{s} (period, start, views DESC);
CREATE TABLE article_views_processed{s} (
    event_id TEXT PRIMARY KEY
) WITHOUT ROWID;
"""

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
    (2, "article views projection", ARTICLE_VIEWS_DDL.format(s="")),
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
]
