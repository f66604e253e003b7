"""A link's fields as a request gives them, checked: every rule violation named in one
422, and a new password hashed in the bounded hasher, never on the event loop."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from sluice.app import FieldError, Unprocessable, User, config
from sluice.app.advanced import PASSWORDS, by_account
from sluice.builtin.links import rules
from sluice.builtin.links.http.schemas import LinkBody, LinkPatch
from sluice.builtin.links.rules import Invalid, check_expiry, check_url, short_origin
from sluice.builtin.links.targeting import InvalidRules, check_rules


class Checks:
    """Collects every field's rule violation, so one 422 names them all."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def run(self, field: str, check: Any, *args: Any) -> Any:
        try:
            return check(*args)
        except InvalidRules as exc:  # each broken rule by its path: rules[2].when.os
            self.errors.extend(exc.errors)
            return None
        except Invalid as exc:
            self.errors.append(FieldError(field, str(exc)))
            return None

    def done(self, detail: str) -> None:
        if self.errors:
            raise Unprocessable(detail, self.errors)


def checked_fields(
    checks: Checks, body: LinkBody | LinkPatch, own: tuple[str, int]
) -> dict[str, Any]:
    """The docs/guides/links.md fields ``body`` sets (null clears, absent keeps), checked."""
    fields: dict[str, Any] = {}
    if body.rules is None:
        fields["rules"] = ()
    elif body.rules is not msgspec.UNSET:
        fields["rules"] = checks.run("rules", check_rules, body.rules, own) or ()
    for name, check in (
        ("max_visits", rules.check_max_visits),
        ("valid_since", rules.check_valid_since),
        ("redirect_status", rules.check_redirect_status),
        ("tags", rules.check_tags),
        ("title", rules.check_title),
    ):
        value = getattr(body, name)
        if value is None:
            fields[name] = () if name == "tags" else None
        elif value is not msgspec.UNSET:
            fields[name] = checks.run(name, check, value)
    if body.password is None:
        fields["password"] = None
    elif body.password is not msgspec.UNSET:
        fields["password"] = checks.run("password", rules.check_password, body.password)
    return fields


async def hashed(request: web.Request, fields: dict[str, Any], user: User) -> dict[str, Any]:
    """``fields`` with a new password as its scrypt hash, made in a thread of the bounded
    hasher (as a registration's: 503 at its bound), never on the event loop; the user's
    account is its claimant (429 beyond SLUICE_PASSWORD_HASH_PER_CLAIMANT)."""
    if "password" not in fields:
        return fields
    password = fields.pop("password")
    hasher = request.app[PASSWORDS]
    hashed = None if password is None else await hasher.hash(password, claimant=by_account(user.id))
    return {**fields, "password_hash": hashed}


def checked_changes(request: web.Request, body: LinkPatch, now: datetime) -> dict[str, Any]:
    """The changes a PATCH asks for (absent keeps, null clears), checked; 422 names every
    violation."""
    checks = Checks()
    changes: dict[str, Any] = {}
    own = short_origin(config(request).base_url)
    if body.url is not msgspec.UNSET:
        changes["url"] = checks.run("url", check_url, body.url, own)
    if body.expires_at is None:
        changes["expires_at"] = None
    elif body.expires_at is not msgspec.UNSET:
        changes["expires_at"] = checks.run("expires_at", check_expiry, body.expires_at, now)
    if body.disabled is not msgspec.UNSET:
        changes["disabled"] = body.disabled
    changes |= checked_fields(checks, body, own)
    checks.done("invalid link change")
    return changes
