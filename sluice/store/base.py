"""The store's interface: what handlers, views and projections may rely on.

SQL is written with ``?`` placeholders and statements both SQLite and
PostgreSQL take (``ON CONFLICT``, ``RETURNING``, upserts that name their
table). Where the two differ, the code above asks the backend: ``dialect``
gives the SQL fragments, ``Tx.lock_history`` the one lock that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import MappingProxyType
from typing import Any, Literal, Protocol

import msgspec

from sluice.events import Event
from sluice.telemetry import tracing

# A row as the store answers it: the selected columns in order.
Row = tuple[Any, ...]

# The head of the history (``Store.max_seq``): the highest seq in the hot table or in
# an archive segment (migration 14), whichever is higher.
HEAD = (
    "SELECT COALESCE(MAX(m), 0) FROM (SELECT MAX(seq) AS m FROM events"
    " UNION ALL SELECT MAX(last_seq) AS m FROM history_segments) AS heads"
)


# A store's ``snapshot_every`` unless the deployment sets SLUICE_SNAPSHOT_EVERY.
NO_OVERRIDES: Mapping[str, int] = MappingProxyType({})


class StoredEvent(msgspec.Struct, frozen=True):
    """One row of the event history (the outbox)."""

    seq: int
    event_id: str
    type: str
    aggregate: str
    payload: bytes
    trace_id: str
    created_at: str
    # The W3C traceparent of the span that appended it; None when tracing was off
    # (sluice.telemetry.tracing). Read by the relay only (events_after).
    traceparent: str | None = None


def appended_under(
    events: Sequence[Event], traceparents: Sequence[str | None] | None
) -> Sequence[str | None] | None:
    """The traceparent each of ``events`` is stored with (``Tx.append``): the caller's,
    else the current span's while tracing is on, else None (none at all)."""
    if traceparents is not None:
        if len(traceparents) != len(events):
            raise ValueError(f"{len(traceparents)} traceparents for {len(events)} events")
        return traceparents
    if not tracing.ENABLED:
        return None
    parent = tracing.current_traceparent()
    return None if parent is None else [parent] * len(events)


def field_name(field: str) -> str:
    """``field``, checked to be a plain name before a dialect puts it into SQL."""
    if not field.isidentifier():
        raise ValueError(f"not a field name: {field!r}")
    return field


def upsert_clause(
    table: str, keys: Sequence[str], add: Sequence[str], replace: Sequence[str]
) -> str:
    """``ON CONFLICT (keys) DO UPDATE``: the ``add`` columns added to the row there, the
    ``replace`` columns overwritten."""
    sets = [f"{field_name(c)} = {table}.{c} + excluded.{c}" for c in add]
    sets += [f"{field_name(c)} = excluded.{c}" for c in replace]
    return f" ON CONFLICT ({', '.join(map(field_name, keys))}) DO UPDATE SET {', '.join(sets)}"


class Dialect(Protocol):
    @property
    def name(self) -> str: ...

    def payload_field(self, field: str) -> str:
        """An SQL expression for a top-level text field of ``events.payload``."""

    @property
    def events_by_seq(self) -> str:
        """``events`` as a FROM clause for a read of a range of seq numbers filtered by
        type: scanned in seq order, whatever the statistics say of the type index."""

    def json_array_agg(self, column: str) -> str:
        """An aggregate joining the JSON documents of a BLOB/bytea ``column`` into one JSON
        array (``[a,b,...]``; NULL for no rows), in no guaranteed order."""

    def row_lock(
        self, mode: Literal["update", "share"], *tables: str, skip_locked: bool = False
    ) -> str:
        """The clause ending a SELECT that locks the rows it reads (``FOR SHARE OF r``)
        until the transaction ends, where the backend needs one (PostgreSQL: writers
        run concurrently; SQLite: every write transaction is exclusive already).
        ``skip_locked``: rows another transaction holds are passed over, not waited for."""


class Tx(Protocol):
    """A unit of work: everything in it commits together or not at all.

    Appended events become visible in ``seq`` order of commit on every backend:
    no event commits with a lower ``seq`` than one already visible.
    """

    @property
    def dialect(self) -> Dialect:
        """What differs between the backends' SQL (placeholders, locking clauses)."""

    # Its store's ``snapshot_every``.
    snapshot_every: Mapping[str, int]

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; returns the number of rows it changed."""

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement once per row of ``rows``."""

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """The first row the query returns, or None; read inside this transaction."""

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Every row the query returns; read inside this transaction."""

    async def append(
        self, *events: Event, traceparents: Sequence[str | None] | None = None
    ) -> None:
        """Add events to the history; they commit with the rest of the transaction.

        ``traceparents``, one per event (None: no span): the W3C ``traceparent`` each is
        stored with instead of the current span's, for a writer that appends, later,
        events that other spans made (a redirect's visit: docs/guides/tracing.md)."""

    async def insert_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Insert many rows into ``table`` the cheapest way the backend has (SQLite:
        multi-row INSERTs; PostgreSQL: a binary ``COPY``)."""

    async def upsert_rows(
        self,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        keys: Sequence[str],
        add: Sequence[str] = (),
        replace: Sequence[str] = (),
    ) -> None:
        """Insert ``rows``; where a row with the same ``keys`` (the primary key) is there,
        add the new row's ``add`` columns to it and overwrite its ``replace`` columns.
        In one statement per backend limit (SQLite: multi-row VALUES; PostgreSQL: one
        INSERT of ``unnest`` arrays), not one per row. The rows' keys must be distinct;
        they are written in the order given (sorted, two transactions lock rows in one
        order and cannot deadlock)."""

    async def insert_new(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str
    ) -> list[Row]:
        """Insert the ``rows`` that conflict with no row of ``table`` (its keys); the
        ``returning`` expression of each row inserted, in no particular order. Two
        transactions inserting one key at once: the second waits for the first to end
        and then inserts nothing if it committed."""

    async def lock_history(self) -> None:
        """Keep every other transaction from appending until this one ends, so the
        history's head read after this call stays the head (snapshots, swaps)."""

    async def serialize(self, name: str) -> None:
        """Transactions that call this with the same ``name`` run one after the other
        from here until they end (read-then-write work such as refilling the code pool)."""

    async def execute_script(self, script: str) -> None:
        """Run DDL statements (migrations, projection rebuilds), written in SQLite's words."""


class Store(Protocol):
    """The database (SQLite or PostgreSQL): its state and the event history. SQL is
    written in SQLite's words with ``?`` placeholders; the PostgreSQL store translates."""

    @property
    def dialect(self) -> Dialect:
        """What differs between the backends' SQL (placeholders, locking clauses)."""

    # The deployment's SLUICE_SNAPSHOT_EVERY: events between two snapshots by aggregate
    # type, over the Aggregate classes' own (docs/concepts/aggregates.md); set once by
    # the process's assembly when it opens the store, handed to each transaction.
    snapshot_every: Mapping[str, int]

    def transaction(self) -> AbstractAsyncContextManager[Tx]:
        """A unit of work, ``async with store.transaction() as tx``: it commits when the
        block ends, and rolls back (nothing written, no event appended) if it raises."""

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """The first row the query returns, or None, outside any transaction."""

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Every row the query returns, outside any transaction."""

    async def events_after(
        self, seq: int, limit: int, *, types: Sequence[str] = ()
    ) -> list[StoredEvent]:
        """Committed events with a sequence above ``seq``, in order."""

    async def max_seq(self) -> int:
        """The sequence of the newest committed event (0 for an empty history)."""

    async def position(self, name: str) -> int:
        """A stored position (0 when never set): the sequence a reader reached."""

    async def insert_rows(
        self,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        durable: bool = True,
    ) -> None:
        """``Tx.insert_rows`` in a transaction of its own. ``durable=False``: for records
        whose loss only loses a record (never an effect), the commit does not wait for
        the disk: a crash of the process loses nothing, one of the machine (or of
        PostgreSQL's server) may lose the last moment's commits."""

    async def set_position(self, name: str, seq: int, *, durable: bool = True) -> None:
        """Store a position. ``durable=False``: the commit does not wait for the disk (a
        power cut may lose it), for positions whose loss only repeats work (the relay's)."""

    def add_commit_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each commit that appended events in this process."""

    async def refresh_statistics(self, *tables: str) -> None:
        """Bring the planner's statistics of ``tables`` up to date where they are stale
        (before a long scan, after a bulk load), so it picks the indexes."""

    async def ping(self) -> None:
        """Raise when the database does not answer."""

    async def close(self) -> None:
        """Close the connections (the process's assembly does; an app never needs to)."""
