"""Deliveries (docs/guides/operate.md): every attempt of every group on every event, recorded
durably.

The consumer runtime hands each batch's attempts to the process's ``DeliveryLog``
after the handler returned and before it acks them, and waits for them to be
written: an acked entry's attempt is in the database. A write slower than
``RECORD_WAIT_S`` (a database that hangs) is not waited for: its rows stay queued
and the consumer acks. Consumers of one process that finish batches while a write
runs are written together by the next one (a group commit), so a busy worker writes
one transaction per round, not one per batch: multi-row INSERTs on SQLite, a binary
``COPY`` on PostgreSQL. Those commits do not wait for the disk
(``Store.insert_rows(durable=False)``, as the relay's position): a crash of a process
loses none of them, a crash of the machine (or of the PostgreSQL server) may lose
the last moment's records, never an effect. A write the database refuses (an
outage) keeps its rows for the next one and lets the consumer ack: the effect
committed, only its record waits. At most ``BACKLOG_MAX`` rows wait; past that the
oldest are dropped and counted (``sluice_deliveries_dropped_total``). A ``kill -9``
loses the rows not yet written, which are those of batches not yet acked: they are
delivered again.

Projection groups write their attempts themselves, in the transaction of their
effect (``record_in``): the attempts they handled as one row per batch
(``sluice.records.delivery_batches``, found by event through the projection's
processed rows), their duplicates a row each. The records ride on a commit the batch
makes anyway, and the consumer neither writes them again nor waits for a write. The
attempt's duration is then up to that write, not the handler's return.

The ``purge-deliveries`` task deletes rows and batches older than
``SLUICE_DELIVERY_RETENTION`` from the low ids up (ids are in time order: rows are
written as they happen), a batch at a time; it reads no index but the primary key.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import structlog

from sluice.records.attempts import Attempt, Batch, DeliveryView
from sluice.records.delivery_batches import of_events as batched_of_events
from sluice.records.delivery_batches import write_batch
from sluice.telemetry.prometheus import DELIVERIES_DROPPED, DELIVERIES_RECORDED

if TYPE_CHECKING:
    from sluice.store import Store, Tx
    from sluice.streams.messages import Message

log = structlog.get_logger(__name__)


BACKLOG_MAX = 100_000
# The longest a consumer waits for its batch's records before it acks anyway.
RECORD_WAIT_S = 5.0
PURGE_BATCH = 5_000
_COLUMNS = (
    "event_id",
    "group_name",
    "consumer",
    "stream",
    "entry_id",
    "attempt",
    "outcome",
    "error",
    "started_at",
    "duration_ms",
)


# Set by the consumer around its handler call when the process records deliveries.
BATCH: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("batch", default=None)


async def record_in(
    tx: Tx, batch: Batch, handled: Sequence[Message], duplicates: Sequence[Message]
) -> None:
    """Write the attempts of a batch's entries in ``tx``, the transaction of their effect:
    the handled ones as the batch's row (``batch.id``), the duplicates a row each."""
    await write_batch(tx, batch, handled)
    if duplicates:
        at = datetime.fromtimestamp(batch.started, UTC).isoformat()
        ms = round((time.time() - batch.started) * 1000, 3)
        rows = [
            (
                m.event_id,
                batch.group,
                batch.consumer,
                m.stream,
                m.entry_id,
                m.deliveries,
                "duplicate",
                None,
                at,
                ms,
            )
            for m in duplicates
        ]
        await tx.insert_rows("deliveries", _COLUMNS, rows)
    DELIVERIES_RECORDED.inc(len(handled) + len(duplicates))


class DeliveryLog:
    """The process's writer of attempts (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: list[Attempt] = []
        self._next: asyncio.Future[None] | None = None
        self._writing: asyncio.Task[None] | None = None

    async def record(self, attempts: Sequence[Attempt]) -> None:
        """Write ``attempts``; returns once they are written, or kept for a later write
        after the database refused them."""
        if not attempts:
            return
        self._waiting += attempts
        if len(self._waiting) > BACKLOG_MAX:
            dropped = len(self._waiting) - BACKLOG_MAX
            del self._waiting[:dropped]
            DELIVERIES_DROPPED.inc(dropped)
            log.warning("deliveries: backlog full, oldest records dropped", dropped=dropped)
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        done = self._next
        if self._writing is None:
            self._writing = asyncio.create_task(self._write_rounds())
        try:
            # A write that takes longer (a database that hangs) must not stop the
            # consumer: its rows stay queued, written when the database answers.
            async with asyncio.timeout(RECORD_WAIT_S):
                await asyncio.shield(done)
        except TimeoutError:
            log.warning(
                "deliveries: a write is slow, acking without waiting for it", wait_s=RECORD_WAIT_S
            )

    async def _write_rounds(self) -> None:
        """Write what waits, then what came meanwhile, until nothing waits."""
        try:
            while self._next is not None:
                batch, self._waiting = self._waiting, []
                done, self._next = self._next, None
                try:
                    await write(self.store, batch)
                    DELIVERIES_RECORDED.inc(len(batch))
                except Exception as exc:  # kept for the next round; the consumer goes on
                    self._waiting[:0] = batch
                    log.warning(
                        "deliveries: not recorded yet, kept", rows=len(batch), error=str(exc)
                    )
                finally:  # whatever happened, no consumer waits on this round any longer
                    if not done.done():
                        done.set_result(None)
        finally:
            self._writing = None
            if self._next is not None and not self._next.done():
                self._next.set_result(None)  # left by a round that ended abnormally
                self._next = None

    async def flush(self) -> None:
        """Write what a failed round kept (a worker stopping calls this once)."""
        if self._waiting:
            kept, self._waiting = self._waiting, []
            await self.record(kept)


async def write(store: Store, attempts: Sequence[Attempt]) -> None:
    """One transaction that does not wait for the disk (see the module docstring): a
    ``COPY`` on PostgreSQL, multi-row INSERTs on SQLite."""
    rows = [
        (
            a.event_id,
            a.group,
            a.consumer,
            a.stream,
            a.entry_id,
            a.attempt,
            a.outcome,
            a.error,
            a.started_at,
            a.duration_ms,
        )
        for a in attempts
    ]
    await store.insert_rows("deliveries", _COLUMNS, rows, durable=False)


async def of_events(
    store: Store, event_ids: Iterable[str], processed: Sequence[str]
) -> dict[str, list[DeliveryView]]:
    """Each event's attempts, in the order they were recorded (``processed``: the
    projections' processed tables, which name their batches of handled attempts)."""
    ids = list(dict.fromkeys(event_ids))
    found: dict[str, list[DeliveryView]] = {event_id: [] for event_id in ids}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for event_id, views in (await batched_of_events(store, chunk, processed)).items():
            found[event_id] += views
        rows = await store.fetchall(
            f"SELECT {', '.join(_COLUMNS)} FROM deliveries"
            f" WHERE event_id IN ({', '.join('?' for _ in chunk)}) ORDER BY id",
            chunk,
        )
        for event_id, group, consumer, stream, entry, attempt, outcome, error, at, ms in rows:
            found[str(event_id)].append(
                DeliveryView(
                    str(group),
                    str(consumer),
                    str(stream),
                    str(entry),
                    int(attempt),
                    outcome,
                    error,
                    str(at),
                    float(ms),
                )
            )
    for views in found.values():  # recorded apart: put each event's in time order
        views.sort(key=lambda view: view.started_at)
    return found


async def purge(store: Store, now: datetime, retention_s: int, batch: int = PURGE_BATCH) -> int:
    """Delete the attempts started before ``now - retention_s``; how many went.

    From the lowest id up, ``batch`` at a time: a batch whose rows are not all
    old enough is the last (rows after it are younger still).
    """
    cutoff = (now - timedelta(seconds=retention_s)).isoformat()
    removed = 0
    for table in ("deliveries", "delivery_batches"):
        while True:
            rows = await store.fetchall(
                f"SELECT id, started_at FROM {table} ORDER BY id LIMIT ?", (batch,)
            )
            old = [int(row_id) for row_id, started in rows if str(started) < cutoff]
            if old:
                async with store.transaction() as tx:
                    removed += await tx.execute(
                        f"DELETE FROM {table} WHERE id <= ? AND started_at < ?",
                        (old[-1], cutoff),
                    )
            if len(old) < batch:
                break
    return removed
