"""The store (core): state and the event history behind a small interface, on SQLite or
PostgreSQL (each dialect stays here), the migration engine with the core's own tables,
and the users and tokens every app's ``require_user`` reads. Imports events, no app: the
apps' migrations are handed to it (``Schema``) by the process's assembly."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from sluice.config.database_url import is_postgres
from sluice.store.base import Row, Store, StoredEvent, Tx
from sluice.store.migrate import Schema
from sluice.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.config import Config
    from sluice.store.migrate import Migration
    from sluice.store.postgres import PostgresStore

__all__ = ["Row", "Schema", "Store", "StoredEvent", "Tx", "migrate_store", "open_store"]


async def open_store(config: Config, schema: Schema) -> Store:
    """Open the configured backend and bring its schema up to date: sluice's tables and
    the apps' (``schema``, from the process's assembly), checking the app set."""
    store = await _backend(config, steps=schema.steps, apps=schema.apps)
    store.snapshot_every = MappingProxyType(config.snapshot_intervals)
    return store


async def migrate_store(config: Config, schema: Schema, *, change_apps: bool = False) -> list[str]:
    """Bring the configured database's schema up to date as ``open_store`` does, and close
    it: the steps that ran, in order, as ``owner:version`` (``sluice:1``, ``links:14``);
    none when it was up to date (``sluice migrate`` says which). ``change_apps`` records
    ``schema.apps`` as the deployment's, instead of refusing another set."""
    store = await _backend(config, migrate=False)
    try:
        return await store.migrate(schema.steps, apps=schema.apps, change_apps=change_apps)
    finally:
        await store.close()


async def _backend(
    config: Config,
    *,
    migrate: bool = True,
    steps: Sequence[Migration] = (),
    apps: Sequence[str] | None = None,
) -> SqliteStore | PostgresStore:
    if is_postgres(config.database_url):
        from sluice.store.postgres import PostgresStore  # asyncpg only where it is used

        return await PostgresStore.open(
            config.database_url,
            pool_size=config.database_pool,
            migrate=migrate,
            steps=steps,
            apps=apps,
        )
    return await SqliteStore.open(config.sqlite_path, migrate=migrate, steps=steps, apps=apps)
