"""Accounts (docs/reference/http-api.md, docs/guides/several-hosts.md): users register, verify their
address from a signed link and sign in for bearer tokens; the ``mail`` group sends the welcome and
verification mails (and, for the reminders app, each reminder's), once per event, within budgets;
another app joins that group through ``mail_group`` (``@mail_group.on(EventType)``).

Declared on ``sluice.app`` like any app; it imports sluice's core and no other app.
The core's ``require_user`` reads the users and tokens tables (``sluice.store.users``),
so a token this app issued is honoured by every app's routes.
"""

from __future__ import annotations

from sluice.builtin.accounts import declare, events, migrations  # noqa: F401  (declare)
from sluice.builtin.accounts.app import app
from sluice.builtin.accounts.mail.group import mail_group

__all__ = ["app", "mail_group"]
