"""Links as the API writes and lists them. Every write runs inside the caller's transaction,
so the row and its event commit together."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TypeVar

import msgspec

from sluice.app import SluiceError, Store, Tx, db_time
from sluice.builtin.links.events import LinkCreated, LinkUpdated
from sluice.builtin.links.pool import ALPHABET, CODE_LENGTH, mark_taken, new_code, take_code
from sluice.builtin.links.rule_shapes import encode_rules
from sluice.builtin.links.rules import Invalid
from sluice.builtin.links.stored import LINK_COLUMNS, Link, link_from_row, tags_column

# A clash needs a pool code equal to an alias, or two equal random 6-character codes
# (1 in 56.8 billion): a handful of attempts is plenty.
CODE_ATTEMPTS = 8
_CODE_SHAPED = re.compile(f"[{re.escape(ALPHABET)}]{{{CODE_LENGTH}}}")
_CURSOR_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_CURSOR_CODE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_E = TypeVar("_E", LinkCreated, LinkUpdated)


class AliasTaken(SluiceError):
    """Another link already has this code (aliases are unique case-sensitively)."""


class NoFreeCode(SluiceError):
    """Every code drawn was in use (``CODE_ATTEMPTS`` of them): not expected to happen."""


class Room:
    """The owner's links against ``SLUICE_LINKS_PER_USER`` in one transaction
    (``room_for_links``); ``made()`` counts each link the transaction creates."""

    def __init__(self, links: int, quota: int) -> None:
        self.links, self.quota = links, quota

    @property
    def full(self) -> bool:
        return self.links >= self.quota

    def refusal(self) -> str:
        return (
            f"you have {self.links} links, the most one account may have"
            f" (SLUICE_LINKS_PER_USER is {self.quota}); links are never deleted"
        )

    def made(self) -> None:
        self.links += 1


async def room_for_links(tx: Tx, owner_id: str, quota: int) -> Room:
    """The owner's links counted in ``tx``, against ``quota``. One owner's link creations
    are decided one at a time until ``tx`` ends (SQLite's writers are anyway), so two
    at once cannot both take the last place; the count is a range of ``links_owner``."""
    await tx.serialize(f"links-of:{owner_id}")
    row = await tx.fetchone("SELECT COUNT(*) FROM links WHERE owner_id = ?", (owner_id,))
    return Room(int(row[0]) if row else 0, quota)


async def _insert(tx: Tx, link: Link, code: str) -> bool:
    created = db_time(link.created_at)
    inserted = await tx.execute(
        f"INSERT INTO links ({LINK_COLUMNS}, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (code) DO NOTHING",
        (
            code,
            link.owner_id,
            link.url,
            _db_time(link.expires_at),
            int(link.disabled),
            created,
            link.max_visits,
            _db_time(link.valid_since),
            link.redirect_status,
            tags_column(link.tags),
            link.title,
            encode_rules(link.rules),
            link.password_hash,
            created,
        ),
    )
    if inserted == 1 and link.tags:
        await _insert_tags(tx, msgspec.structs.replace(link, code=code), link.tags)
    return inserted == 1


def _db_time(value: datetime | None) -> str | None:
    # db_time's text, also for the years before 1000 a valid_since may name (strftime's
    # %Y writes "336", not "0336").
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


async def _insert_tags(tx: Tx, link: Link, tags: Iterable[str]) -> None:
    # owner_id and created_at (both fixed for a link's life) are copied so that one index
    # range of link_tags is a page of the owner's links with that tag, newest first.
    await tx.executemany(
        "INSERT INTO link_tags (code, tag, owner_id, created_at) VALUES (?, ?, ?, ?)",
        [(link.code, tag, link.owner_id, db_time(link.created_at)) for tag in tags],
    )


async def create_link(tx: Tx, draft: Link, *, alias: str | None) -> tuple[Link, bool]:
    """Store ``draft`` under ``alias``, else under a code from the pool, else a fresh random
    code when the pool is empty. Returns the stored link and whether the pool was empty.

    Raises ``AliasTaken`` when the alias is in use. A pool code that collides with an
    existing alias stays taken and the next one is tried.
    """
    if alias is not None:
        if not await _insert(tx, draft, alias):
            raise AliasTaken(alias)
        if _CODE_SHAPED.fullmatch(alias):
            await mark_taken(tx, alias)  # so the pool never hands it out
        return msgspec.structs.replace(draft, code=alias), False
    empty = False
    for _ in range(CODE_ATTEMPTS):
        code = None if empty else await take_code(tx)
        if code is None:
            empty = True
            code = new_code()
            await mark_taken(tx, code)
        if await _insert(tx, draft, code):
            return msgspec.structs.replace(draft, code=code), empty
    raise NoFreeCode(f"no free short code after {CODE_ATTEMPTS} attempts")


async def link_for_update(tx: Tx, code: str) -> Link | None:
    """The link as of this transaction, locked until it ends: concurrent changes of one
    link apply one after the other, none lost."""
    row = await tx.fetchone(
        f"SELECT {LINK_COLUMNS} FROM links WHERE code = ?" + tx.dialect.row_lock("update"),
        (code,),
    )
    return None if row is None else link_from_row(row)


async def save_link(tx: Tx, link: Link, now: datetime, *, old_tags: tuple[str, ...]) -> None:
    """Write a link's mutable fields (all but code, owner and creation time), and its
    ``link_tags`` rows where the tags changed from ``old_tags``."""
    await tx.execute(
        "UPDATE links SET url = ?, expires_at = ?, disabled = ?, max_visits = ?,"
        " valid_since = ?, redirect_status = ?, tags = ?, title = ?, rules = ?,"
        " password_hash = ?, updated_at = ? WHERE code = ?",
        (
            link.url,
            _db_time(link.expires_at),
            int(link.disabled),
            link.max_visits,
            _db_time(link.valid_since),
            link.redirect_status,
            tags_column(link.tags),
            link.title,
            encode_rules(link.rules),
            link.password_hash,
            db_time(now),
            link.code,
        ),
    )
    gone = [tag for tag in old_tags if tag not in link.tags]
    if gone:
        await tx.executemany(
            "DELETE FROM link_tags WHERE code = ? AND tag = ?", [(link.code, t) for t in gone]
        )
    await _insert_tags(tx, link, [tag for tag in link.tags if tag not in old_tags])


def link_event(kind: type[_E], link: Link, trace_id: str) -> _E:
    """The ``LinkCreated`` or ``LinkUpdated`` carrying ``link``'s whole state; of its
    password, only whether it has one (the hash never leaves the links table)."""
    return kind(
        code=link.code,
        owner_id=link.owner_id,
        url=link.url,
        expires_at=link.expires_at,
        disabled=link.disabled,
        max_visits=link.max_visits,
        valid_since=link.valid_since,
        redirect_status=link.redirect_status,
        tags=link.tags,
        title=link.title,
        rules=link.rules,
        has_password=link.has_password,
        trace_id=trace_id,
    )


def encode_cursor(link: Link) -> str:
    """An opaque position after ``link`` in the newest-first order."""
    raw = f"{db_time(link.created_at)} {link.code}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """(created_at, code) of the last link of the previous page; ``Invalid`` if malformed."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise Invalid("is not a cursor this API returned") from None
    created, _, code = raw.partition(" ")
    if not (_CURSOR_TIME.fullmatch(created) and _CURSOR_CODE.fullmatch(code)):
        raise Invalid("is not a cursor this API returned")
    return created, code


async def links_page(
    store: Store,
    owner_id: str,
    limit: int,
    after: tuple[str, str] | None,
    *,
    tag: str | None = None,
) -> list[Link]:
    """Up to ``limit`` of the owner's links, newest first (ties by code), after a cursor;
    with ``tag``, only links that have it (one range of the ``link_tags_owner`` index)."""
    if tag is None:
        sql = f"SELECT {LINK_COLUMNS} FROM links WHERE owner_id = ?"
        params: list[object] = [owner_id]
        order = "created_at"
    else:
        columns = ", ".join(f"links.{column}" for column in LINK_COLUMNS.split(", "))
        sql = (
            f"SELECT {columns} FROM link_tags JOIN links ON links.code = link_tags.code"
            " WHERE link_tags.owner_id = ? AND link_tags.tag = ?"
        )
        params = [owner_id, tag]
        order = "link_tags.created_at"
    code = "link_tags.code" if tag is not None else "code"
    if after is not None:
        sql += f" AND ({order} < ? OR ({order} = ? AND {code} > ?))"
        params += [after[0], after[0], after[1]]
    sql += f" ORDER BY {order} DESC, {code} LIMIT ?"
    params.append(limit)
    return [link_from_row(row) for row in await store.fetchall(sql, params)]
