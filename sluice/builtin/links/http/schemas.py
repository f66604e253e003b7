"""The links app's request and response bodies (the OpenAPI schemas derive from them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from sluice.app import problem
from sluice.builtin.links.rule_shapes import Rule

# An instant in a body, checked by the view (422 with the reason), not decoded (400).
Rfc3339 = Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"})]

# The code of one of the caller's links, in the paths of links, link_stats and jobs (exports).
CODE = {"name": "code", "in": "path", "required": True, "schema": {"type": "string"}}
NO_LINK = problem("no such link, or another user's (the same answer for both)")

# Short links. The url, alias and expiry rules are checked by the views (422), so a
# missing url and an invalid one answer alike; the annotations below document them.

LinkUrl = Annotated[str, msgspec.Meta(extra_json_schema={"format": "uri", "maxLength": 2048})]
LinkAlias = Annotated[
    str, msgspec.Meta(extra_json_schema={"pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{2,63}$"})
]


MaxVisits = Annotated[int, msgspec.Meta(extra_json_schema={"minimum": 1})]
RedirectStatus = Annotated[int, msgspec.Meta(extra_json_schema={"enum": [301, 302, 307, 308]})]
Tag = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": "^[a-z0-9-]{1,32}$"})]
# Up to 10 distinct tags: a list of 11 with a duplicate is fine, hence no maxItems.
Tags = Annotated[list[Tag], msgspec.Meta(description="at most 10 distinct tags")]
Title = Annotated[str, msgspec.Meta(extra_json_schema={"maxLength": 200})]
# Checked by the view (422 outside 8..128); never answered: LinkOut has has_password.
LinkPassword = Annotated[
    str, msgspec.Meta(extra_json_schema={"minLength": 8, "maxLength": 128, "writeOnly": True})
]


# Checked by the view (sluice/builtin/links/targeting.py), so that each broken rule is named by
# its path in one 422; the schema documents the shape (as LinkOut's rules).
Rules = Annotated[
    list[Any],
    msgspec.Meta(
        description="Up to 10 of {when: {device?, os?, language?, country?}, url}; the first"
        " whose conditions all hold gives the redirect's target, else `url` does",
        extra_json_schema={"maxItems": 10},
    ),
]


class LinkBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: LinkUrl | None = None
    alias: LinkAlias | None = None
    expires_at: Rfc3339 | None = None
    # Once that many GET redirects were served, 410 (counted across replicas).
    max_visits: MaxVisits | None = None
    # Before it, the code answers 404 as an unknown one. Any RFC 3339 time with an offset.
    valid_since: Rfc3339 | None = None
    redirect_status: RedirectStatus | None = None  # 302 when absent
    tags: Tags | None = None  # duplicates are dropped; at most 10 distinct
    title: Title | None = None
    rules: Rules | None = None  # [] or null: none
    # GET /{code} then answers a form, and POST /{code} with it redirects.
    password: LinkPassword | None = None


class LinkPatch(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Absent fields keep their value; null clears `expires_at`, `max_visits`,
    `valid_since`, `tags`, `title`, `rules` and `password`."""

    url: LinkUrl | msgspec.UnsetType = msgspec.UNSET
    expires_at: Rfc3339 | msgspec.UnsetType | None = msgspec.UNSET
    disabled: bool | msgspec.UnsetType = msgspec.UNSET
    max_visits: MaxVisits | msgspec.UnsetType | None = msgspec.UNSET
    valid_since: Rfc3339 | msgspec.UnsetType | None = msgspec.UNSET
    redirect_status: RedirectStatus | msgspec.UnsetType = msgspec.UNSET
    tags: Tags | msgspec.UnsetType | None = msgspec.UNSET
    title: Title | msgspec.UnsetType | None = msgspec.UNSET
    rules: Rules | msgspec.UnsetType | None = msgspec.UNSET
    password: LinkPassword | msgspec.UnsetType | None = msgspec.UNSET  # null: none any more


class LinkOut(msgspec.Struct, kw_only=True):
    code: str
    short_url: str
    url: str
    expires_at: datetime | None
    disabled: bool
    created_at: datetime
    max_visits: int | None
    valid_since: datetime | None
    redirect_status: RedirectStatus
    tags: list[str]
    title: str | None
    rules: list[Rule]  # absent conditions are left out
    has_password: bool  # the password itself is never answered


class LinkPage(msgspec.Struct, kw_only=True):
    items: list[LinkOut]
    next_cursor: str | None


# Link statistics: sluice/builtin/links/http/link_stats_schemas.py.


# Reminders. Missing fields are checked by the view (422 with the field named).


# Export jobs: POST /v1/links/{code}/exports answers ExportStarted, GET /v1/jobs/{id} a JobOut.


class ExportStarted(msgspec.Struct, kw_only=True):
    job_id: str
    status_url: str


class JobOut(msgspec.Struct, kw_only=True):
    id: str
    kind: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: Annotated[int, msgspec.Meta(ge=0, le=100)]
    created_at: datetime
    finished_at: datetime | None
    # Set once succeeded, until the retention period removes the result.
    result_url: str | None
    error: str | None
