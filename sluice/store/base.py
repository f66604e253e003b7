"""The store's interface: what handlers, views and projections may rely on.

SQL is written with ``?`` placeholders and portable statements; a backend
for another database translates placeholders, nothing else changes above it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec

from sluice.events import Event

Row = tuple[Any, ...]


class StoredEvent(msgspec.Struct, frozen=True):
    """One row of the event history (the outbox)."""

    seq: int
    event_id: str
    type: str
    aggregate: str
    payload: bytes
    trace_id: str
    created_at: str


class Tx(Protocol):
    """A unit of work: everything in it commits together or not at all."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; returns the number of rows it changed."""

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    async def append(self, *events: Event) -> None:
        """Add events to the history; they commit with the rest of the transaction."""

    async def execute_script(self, script: str) -> None:
        """Run DDL statements (projection rebuilds)."""


class Store(Protocol):
    def transaction(self) -> AbstractAsyncContextManager[Tx]: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    async def events_after(
        self, seq: int, limit: int, *, types: Sequence[str] = ()
    ) -> list[StoredEvent]:
        """Committed events with a sequence above ``seq``, in order."""

    async def max_seq(self) -> int: ...

    async def position(self, name: str) -> int: ...

    async def set_position(self, name: str, seq: int) -> None: ...

    def add_commit_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each commit that appended events in this process."""

    async def ping(self) -> None: ...

    async def close(self) -> None: ...
