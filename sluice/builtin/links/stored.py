"""Short links as stored: what the redirect path and the links API both read."""

from __future__ import annotations

from datetime import datetime

import msgspec

from sluice.app import Row, Store, db_time
from sluice.builtin.links.rule_shapes import Rule, decode_rules


class Link(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    owner_id: str
    url: str
    expires_at: datetime | None
    disabled: bool
    created_at: datetime
    # docs/guides/links.md (issue 18). A link without max_visits and valid_since redirects from the
    # cache alone; the others are checked per request (sluice/builtin/links/limits.py).
    max_visits: int | None = None
    valid_since: datetime | None = None
    redirect_status: int = 302
    tags: tuple[str, ...] = ()
    title: str | None = None
    rules: tuple[Rule, ...] = ()  # the first that matches picks the target (links.targeting)
    # The scrypt hash of the link's password (sluice/builtin/links/http/link_passwords.py), None
    # for none.
    # Only the POST of the password form reads it: events, responses and the link cache
    # carry ``has_password``, and the repr leaves it out, should a link ever be logged.
    password_hash: str | None = None

    @property
    def has_password(self) -> bool:
        return self.password_hash is not None

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={'<hidden>' if name == 'password_hash' and value else repr(value)}"
            for name, value in msgspec.structs.asdict(self).items()
        )
        return f"Link({fields})"

    def gone(self, now: datetime) -> bool:
        """Disabled or expired: the redirect answers 410."""
        return self.disabled or (self.expires_at is not None and self.expires_at <= now)


LINK_COLUMNS = (
    "code, owner_id, url, expires_at, disabled, created_at,"
    " max_visits, valid_since, redirect_status, tags, title, rules, password_hash"
)


def _time(value: object) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))


def tags_column(tags: tuple[str, ...]) -> str:
    """Tags as the ``links.tags`` column holds them: space-separated (a tag has no space)."""
    return " ".join(tags)


def link_from_row(row: Row) -> Link:
    return Link(
        code=str(row[0]),
        owner_id=str(row[1]),
        url=str(row[2]),
        expires_at=_time(row[3]),
        disabled=bool(row[4]),
        created_at=datetime.fromisoformat(str(row[5])),
        max_visits=None if row[6] is None else int(row[6]),
        valid_since=_time(row[7]),
        redirect_status=int(row[8]),
        tags=tuple(str(row[9]).split()),
        title=None if row[10] is None else str(row[10]),
        rules=decode_rules(row[11]),
        password_hash=None if row[12] is None else str(row[12]),
    )


async def get_link(store: Store, code: str) -> Link | None:
    row = await store.fetchone(f"SELECT {LINK_COLUMNS} FROM links WHERE code = ?", (code,))
    return None if row is None else link_from_row(row)


__all__ = ["LINK_COLUMNS", "Link", "db_time", "get_link", "link_from_row", "tags_column"]
