"""Secrets every host must agree on, kept in the database (table ``secrets``).

Processes on different hosts share only the database and Redis, so a secret
one process makes up (the visitor-hash key, the hash of a generated admin
token) is stored here: the first writer wins and every process reads the
same value.
"""

from __future__ import annotations

from sluice.events import utcnow
from sluice.store.base import Store


async def shared_secret(store: Store, name: str, candidate: str) -> str:
    """The stored value of ``name``; ``candidate`` becomes it if there is none yet."""
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO secrets (name, value, created_at) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO NOTHING",
            (name, candidate, utcnow().isoformat()),
        )
        row = await tx.fetchone("SELECT value FROM secrets WHERE name = ?", (name,))
    assert row is not None  # inserted, or there already
    return str(row[0])


async def read_secret(store: Store, name: str) -> str | None:
    row = await store.fetchone("SELECT value FROM secrets WHERE name = ?", (name,))
    return None if row is None else str(row[0])


async def set_secret(store: Store, name: str, value: str) -> None:
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO secrets (name, value, created_at) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value,"
            " created_at = excluded.created_at",
            (name, value, utcnow().isoformat()),
        )
