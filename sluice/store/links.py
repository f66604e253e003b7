"""Short links as stored: what the redirect path and the links API both read."""

from __future__ import annotations

from datetime import datetime

import msgspec

from sluice.store.base import Row, Store
from sluice.store.users import db_time


class Link(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    owner_id: str
    url: str
    expires_at: datetime | None
    disabled: bool
    created_at: datetime

    def gone(self, now: datetime) -> bool:
        """Disabled or expired: the redirect answers 410."""
        return self.disabled or (self.expires_at is not None and self.expires_at <= now)


LINK_COLUMNS = "code, owner_id, url, expires_at, disabled, created_at"


def link_from_row(row: Row) -> Link:
    return Link(
        code=str(row[0]),
        owner_id=str(row[1]),
        url=str(row[2]),
        expires_at=None if row[3] is None else datetime.fromisoformat(str(row[3])),
        disabled=bool(row[4]),
        created_at=datetime.fromisoformat(str(row[5])),
    )


async def get_link(store: Store, code: str) -> Link | None:
    row = await store.fetchone(f"SELECT {LINK_COLUMNS} FROM links WHERE code = ?", (code,))
    return None if row is None else link_from_row(row)


__all__ = ["LINK_COLUMNS", "Link", "db_time", "get_link", "link_from_row"]
