"""The ``accounts`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App
from sluice.builtin.accounts.settings import AccountsSettings

app = App(
    "accounts",
    settings=AccountsSettings,
    description="users who register, verify their address and sign in for tokens, and the mail"
    " sluice sends them",
)
