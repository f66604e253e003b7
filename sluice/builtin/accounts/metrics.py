"""The accounts app's metrics: the mail it sends (docs/reference/metrics.md)."""

from __future__ import annotations

from sluice.builtin.accounts.app import app

MAILS = app.counter("sluice_mails", "Mails by outcome (sent, skipped, failed)", ["outcome"])
MAILS_WITHHELD = app.counter(
    "sluice_mails_withheld",
    "Mails not sent on purpose, by reason (unverified, paused, over_budget)",
    ["reason"],
)
