"""The store (core): state and the event history behind a small interface, on SQLite or
PostgreSQL (each dialect stays here), the migration engine with the core's own tables,
and the users and tokens every app's ``require_user`` reads. Imports events, no app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.database_url import is_postgres
from sluice.store.base import Row, Store, StoredEvent, Tx
from sluice.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from sluice.config import Config

__all__ = ["Row", "Store", "StoredEvent", "Tx", "open_store"]


async def open_store(config: Config) -> Store:
    """Open the configured backend and bring its schema up to date: sluice's tables and
    those of the apps ``config`` names (``SLUICE_APPS``)."""
    from sluice.app.loading import load_apps  # the apps import the store

    steps = load_apps(config).migrations
    if is_postgres(config.database_url):
        from sluice.store.postgres import PostgresStore  # asyncpg only where it is used

        return await PostgresStore.open(
            config.database_url, pool_size=config.database_pool, steps=steps
        )
    return await SqliteStore.open(config.sqlite_path, steps=steps)
