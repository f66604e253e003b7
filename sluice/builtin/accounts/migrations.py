"""The accounts app's schema history: the mail idempotency keys (``mail_sends``, read and
written by ``sluice.builtin.accounts.mail``) and the columns of ``users`` that only this
app reads, those of verification requests (``sluice.builtin.accounts.verification``).

``users`` itself, and its ``verified_at``, are the core's (``sluice.store.users`` reads
them for every app's ``require_user``). Each step names in ``replaces`` the version of
sluice's own history that made its part before the app held it: a database made by an
earlier release has it and records the step as done; a new one runs it.
"""

from __future__ import annotations

from sluice.builtin.accounts.app import app

app.migration(
    1,
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
    replaces=(4,),
)

# verification_requested_at, verification_requests: the last new link asked for (POST
# /v1/me/verification, one an hour) and how many were.
app.migration(
    2,
    "verification requests",
    """
    ALTER TABLE users ADD COLUMN verification_requested_at TEXT;
    ALTER TABLE users ADD COLUMN verification_requests INTEGER NOT NULL DEFAULT 0;
    """,
    replaces=(12,),
)
