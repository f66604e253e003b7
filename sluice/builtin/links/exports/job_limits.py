"""How many jobs of a kind (exports, imports) an owner may have queued or running:
``SLUICE_EXPORTS_PER_USER``, ``SLUICE_IMPORTS_PER_USER``."""

from __future__ import annotations

from sluice.app import Store, Tx


class TooManyJobs(Exception):
    """The user has as many jobs of this kind (exports, imports) queued or running as one
    user may."""

    def __init__(self, kind: str, active: int, limit: int) -> None:
        super().__init__(f"{active} {kind}s queued or running, at most {limit}")
        self.kind = kind
        self.active = active
        self.limit = limit


_ACTIVE = (
    "SELECT COUNT(*) FROM jobs WHERE kind = ? AND owner_id = ? AND status IN ('queued', 'running')"
)


async def active_jobs(db: Store | Tx, kind: str, owner_id: str) -> int:
    """The owner's jobs of ``kind`` queued or running."""
    row = await db.fetchone(_ACTIVE, (kind, owner_id))
    return int(row[0]) if row else 0


def check_active(kind: str, active: int, per_user: int) -> None:
    """``TooManyJobs`` when ``active`` jobs of ``kind`` leave no room under ``per_user``."""
    if active >= per_user:
        raise TooManyJobs(kind, active, per_user)


async def check_room(tx: Tx, kind: str, owner_id: str, per_user: int) -> None:
    """Room for one more job of ``kind``: ``TooManyJobs`` when the owner has ``per_user``
    queued or running. One owner's new jobs of a kind are decided one at a time (SQLite's
    writers are anyway), so two requests at once cannot both take the last place."""
    await tx.serialize(f"{kind}s-of:{owner_id}")
    check_active(kind, await active_jobs(tx, kind, owner_id), per_user)
