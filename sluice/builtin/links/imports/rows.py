"""One row of an import applied inside its batch's transaction: created, existing or invalid.

The rules are the links API's (``sluice.builtin.links.rules``) and the link is made by
``repository.create_link`` with its ``LinkCreated`` in the same transaction, as a
``POST /v1/links`` makes it.

**Importing a file again creates nothing twice.** A row is keyed by its code when it
has one (the link with that code is the caller's, to the same URL: ``existing``),
else by the caller and the URL: every link an import creates is recorded in
``import_keys`` under (owner, SHA-256 of the URL as stored), and a later row without a
code whose URL the caller imported before is ``existing`` too (also within one file).
A link made with ``POST /v1/links`` is not in that record: an import does not look
for it.

**Every link counts against the owner's ``SLUICE_LINKS_PER_USER``**, as one made with
``POST /v1/links`` does: a new row beyond it is ``invalid``, with the reason (rows
that are ``existing`` make nothing and still pass).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import msgspec

from sluice.app import Tx, db_time
from sluice.builtin.links import repository
from sluice.builtin.links.events import LinkCreated
from sluice.builtin.links.imports.formats import Draft
from sluice.builtin.links.repository import Room
from sluice.builtin.links.rules import (
    TITLE_MAX,
    Invalid,
    check_alias,
    check_expiry,
    check_tags,
    check_title,
    check_url,
)
from sluice.builtin.links.stored import Link

Outcome = Literal["created", "existing", "invalid"]


class RowOutcome(msgspec.Struct, kw_only=True):
    """One row's line in the result."""

    row: int  # 1 for the first row after the header
    outcome: Outcome
    code: str | None = None
    short_url: str | None = None
    url: str | None = None
    reason: str | None = None  # why the row is invalid, or why its code was not kept


@dataclass(frozen=True)
class RowContext:
    owner_id: str
    own: tuple[str, int]  # the service's own short domain (refused as a target)
    base_url: str
    now: datetime
    foreign: bool  # codes come from another service: replaced when they cannot be kept
    routes: Mapping[str, str] = field(default_factory=dict)  # words no alias may take


class _Refused(Exception):
    """The row is invalid; the message says which field and why."""


@dataclass(frozen=True)
class _Checked:
    url: str
    code: str | None
    expires_at: datetime | None
    tags: tuple[str, ...]
    title: str | None
    note: str | None  # why a foreign code was not kept


def _field(name: str, check: Any, *args: Any) -> Any:
    try:
        return check(*args)
    except Invalid as exc:
        raise _Refused(f"{name}: {exc}") from None


def _checked(draft: Draft, ctx: RowContext) -> _Checked:
    """The row by the API's rules; ``_Refused`` when it cannot be imported. From another
    service: a code that breaks the alias rules is dropped (with a note), tags are
    lowercased with spaces as ``-``, a title is cut to its longest."""
    url = _field("url", check_url, draft.url, ctx.own)
    code, note = draft.code, None
    if code is not None:
        try:
            code = check_alias(code, ctx.routes)
        except Invalid as exc:
            if not ctx.foreign:
                raise _Refused(f"alias: {exc}") from None
            code, note = None, f"the code {draft.code!r} {exc}; the link got a new code"
    expires_at = None
    if draft.expires_at is not None:
        expires_at = _field("expires_at", check_expiry, draft.expires_at, ctx.now)
    tags = draft.tags
    if ctx.foreign:
        tags = tuple("-".join(tag.lower().split()) for tag in tags)
    title = draft.title
    if ctx.foreign and title is not None:
        title = title[:TITLE_MAX]
    return _Checked(
        url=url,
        code=code,
        expires_at=expires_at,
        tags=_field("tags", check_tags, list(tags)) if tags else (),
        title=None if title is None else _field("title", check_title, title),
        note=note,
    )


def url_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


async def apply(tx: Tx, draft: Draft, ctx: RowContext, room: Room) -> RowOutcome:
    """The row's outcome, with its link created (and its event appended) if it is new
    and ``room`` has a place for it (invalid otherwise: the owner's quota is used up)."""
    try:
        checked = _checked(draft, ctx)
    except _Refused as exc:
        return RowOutcome(row=draft.row, outcome="invalid", url=draft.url or None, reason=str(exc))
    url, code, note = checked.url, checked.code, checked.note
    if code is not None:
        row = await tx.fetchone("SELECT owner_id, url FROM links WHERE code = ?", (code,))
        if row is not None and (row[0], row[1]) == (ctx.owner_id, url):
            return _done(ctx, draft, "existing", code, url, note)
        if row is not None:
            if not ctx.foreign:
                return _invalid(draft, url, f"alias: {code!r} is taken")
            code, note = None, f"the code {code!r} is taken; the link got a new code"
    if code is None:
        known = await tx.fetchone(
            "SELECT code FROM import_keys WHERE owner_id = ? AND url_key = ?",
            (ctx.owner_id, url_key(url)),
        )
        if known is not None:
            return _done(ctx, draft, "existing", str(known[0]), url, note)
    if room.full:
        return _invalid(draft, url, room.refusal())
    draft_link = Link(
        code="",
        owner_id=ctx.owner_id,
        url=url,
        expires_at=checked.expires_at,
        disabled=False,
        created_at=ctx.now,
        tags=checked.tags,
        title=checked.title,
    )
    try:
        link, _ = await repository.create_link(tx, draft_link, alias=code)
    except repository.AliasTaken:  # nothing was written: the transaction goes on
        return _invalid(draft, url, f"alias: {code!r} is taken")
    room.made()
    await tx.execute(
        "INSERT INTO import_keys (owner_id, url_key, code, created_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (owner_id, url_key) DO NOTHING",
        (ctx.owner_id, url_key(url), link.code, db_time(ctx.now)),
    )
    await tx.append(
        LinkCreated(
            code=link.code,
            owner_id=link.owner_id,
            url=link.url,
            expires_at=link.expires_at,
            disabled=link.disabled,
            tags=link.tags,
            title=link.title,
        )
    )
    return _done(ctx, draft, "created", link.code, url, note)


def _done(
    ctx: RowContext, draft: Draft, outcome: Outcome, code: str, url: str, note: str | None
) -> RowOutcome:
    return RowOutcome(
        row=draft.row,
        outcome=outcome,
        code=code,
        short_url=f"{ctx.base_url}/{code}",
        url=url,
        reason=note,
    )


def _invalid(draft: Draft, url: str, reason: str) -> RowOutcome:
    return RowOutcome(row=draft.row, outcome="invalid", url=url, reason=reason)
