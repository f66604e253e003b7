"""Request and response bodies of the HTTP API; openapi.py derives its schemas from them."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal

import msgspec

from sluice.errors import FieldError
from sluice.projections.article_views import PERIODS

VIEWER_MAX_LENGTH = 256

# The length rule is checked by the view (422), not by decoding (which would answer 400),
# so it appears here only as documentation.
Viewer = Annotated[
    str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": VIEWER_MAX_LENGTH})
]


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


class ViewBody(msgspec.Struct, kw_only=True):
    viewer: Viewer | None = None


class ViewCounted(msgspec.Struct, kw_only=True):
    counted: bool


class ArticleViews(msgspec.Struct, kw_only=True):
    article_id: str
    views: int
    as_of: datetime


class TopItem(msgspec.Struct, kw_only=True):
    article_id: str
    views: int


class TopArticles(msgspec.Struct, kw_only=True):
    period: Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(PERIODS)})]
    start: date
    items: list[TopItem]


# Users and tokens. Required fields are checked by the views (422 with the
# field named), so a missing field and an invalid one answer alike.


class RegisterBody(msgspec.Struct, kw_only=True):
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


class TokenBody(msgspec.Struct, kw_only=True):
    email: str | None = None
    password: str | None = None


class TokenOut(msgspec.Struct, kw_only=True):
    token: str
    expires_at: datetime
