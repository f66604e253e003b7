"""The accounts app's event types: what it commits to the history (and the outbox) together
with its state, published on the streams of its aggregates (users)."""

from __future__ import annotations

from typing import ClassVar

from sluice.app import Event
from sluice.builtin.accounts.app import app

app.aggregate("users", key="user_id")


@app.event
class UserRegistered(Event, frozen=True, kw_only=True, tag=True):
    """A user registered (``POST /v1/users``); the welcome mail and its verification link
    follow from it."""

    aggregate: ClassVar[str] = "users"
    user_id: str
    email: str
    name: str | None = None


@app.event
class UserVerified(Event, frozen=True, kw_only=True, tag=True):
    """The user followed the verification link sent to ``email``."""

    aggregate: ClassVar[str] = "users"
    user_id: str
    email: str


@app.event
class VerificationRequested(Event, frozen=True, kw_only=True, tag=True):
    """The user asked for a new verification link (the first came with the welcome mail)."""

    aggregate: ClassVar[str] = "users"
    user_id: str
    email: str
    name: str | None = None
