"""Reminders (docs/guides/reminders.md): a user's cron and one-shot reminders, edited, paused and
deleted over the API; the scheduler process fires each occurrence once across replicas, and the
``mail`` group of the accounts app mails it.

Declared on ``sluice.app`` like any app; it imports sluice's core and the accounts app,
which its ``App`` requires (its mail handler joins that app's ``mail`` group).
"""

from __future__ import annotations

from sluice.builtin.reminders import declare, events, migrations  # noqa: F401  (declare)
from sluice.builtin.reminders.app import app

__all__ = ["app"]
