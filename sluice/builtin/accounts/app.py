"""The ``accounts`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App

app = App(
    "accounts",
    description="users who register, verify their address and sign in for tokens, and the mail"
    " sluice sends them",
)
