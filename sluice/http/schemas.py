"""The core's request and response bodies (problems, health); each app keeps its own
beside its views. openapi.py derives the document's schemas from them."""

from __future__ import annotations

from typing import Literal

import msgspec

from sluice.errors import FieldError


class Problem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An RFC 9457 problem document."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None
    checks: dict[str, str] | None = None


class Health(msgspec.Struct, kw_only=True):
    status: Literal["ok"] = "ok"


class Readiness(msgspec.Struct, kw_only=True):
    status: Literal["ok"]
    checks: dict[str, str]


# Users and tokens. Required fields are checked by the views (422 with the
# field named), so a missing field and an invalid one answer alike.
