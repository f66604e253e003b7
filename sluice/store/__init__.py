"""The store: state and the event history, behind a small interface."""

from __future__ import annotations

from sluice.config import Config
from sluice.store.base import Row, Store, StoredEvent, Tx
from sluice.store.sqlite import SqliteStore

__all__ = ["Row", "Store", "StoredEvent", "Tx", "open_store"]


async def open_store(config: Config) -> Store:
    """Open the configured backend and bring its schema up to date."""
    return await SqliteStore.open(config.sqlite_path)
