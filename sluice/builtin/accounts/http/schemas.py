"""The accounts app's request and response bodies (the OpenAPI schemas derive from them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec


class RegisterBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    email: str | None = None
    password: (
        Annotated[str, msgspec.Meta(extra_json_schema={"minLength": 8, "maxLength": 128})] | None
    ) = None
    name: str | None = None


class UserOut(msgspec.Struct, kw_only=True):
    id: str
    email: str
    name: str | None
    created_at: datetime
    # Only a verified address gets mail other than the welcome mail (reminders).
    verified: bool = False
    verified_at: datetime | None = None


class VerifyBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The token of a verification link (the `token` query parameter of the mailed URL)."""

    token: str | None = None


class VerifiedOut(msgspec.Struct, kw_only=True):
    """The address is verified; `verified_at` is when it first was (a link used twice)."""

    user_id: str
    email: str
    verified_at: datetime


class VerificationSent(msgspec.Struct, kw_only=True):
    """A new verification link is on its way to `email`."""

    email: str


class TokenBody(msgspec.Struct, kw_only=True):
    """Other fields are ignored (clients log in with the body they registered with); both
    fields are required, so a misspelt one is a 422, never silence."""

    email: str | None = None
    password: str | None = None


class TokenOut(msgspec.Struct, kw_only=True):
    token: str
    expires_at: datetime


class PasswordChange(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    current_password: str | None = None
    new_password: (
        Annotated[str, msgspec.Meta(extra_json_schema={"minLength": 8, "maxLength": 128})] | None
    ) = None


class TokenInfo(msgspec.Struct, kw_only=True):
    """One of the user's tokens: never the token itself. `current`: the one this request
    carries."""

    id: str
    created_at: datetime
    expires_at: datetime
    current: bool


class TokenList(msgspec.Struct, kw_only=True):
    items: list[TokenInfo]
