"""The ``accounts`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App
from sluice.builtin.accounts.keys import AccountsKeys
from sluice.builtin.accounts.settings import AccountsSettings

app = App(
    "accounts",
    keys=AccountsKeys,
    settings=AccountsSettings,
    description="users who register, verify their address and sign in for tokens, and the mail"
    " sluice sends them",
)
