"""A projection batch's handled attempts as one row (table ``delivery_batches``).

A projection group applies hundreds of events per transaction, and a row per attempt
in ``deliveries`` (with its index by event) cost more than the projection's own
processed row: 390 bytes of WAL per attempt on PostgreSQL, a quarter of the group's
throughput (bench/README.md, deliveries.py). So the attempts a batch handled go into
one row: the batch's group, consumer, start and duration, and its entries
``(event_id, stream, entry_id, attempt)`` as one msgpack column compressed with zlib
(level 1: 40 KB -> 10 KB for 500 entries in 0.3 ms; on SQLite the uncompressed column
doubled the pages a batch's commit writes), one INSERT in the batch's transaction
after its effect. The batch's id is drawn by the process before
(``sluice.records.attempts.new_batch_id``), so each processed row the batch inserts
carries it (``batch_id``) without a round trip for it. Found by event through the
processed rows: an event's handled attempt by a projection is the batch its processed
row names.

Duplicates (rare) and every other group's attempts keep a ``deliveries`` row each.
The purge removes batches as it removes rows, by id and start time; a processed row
whose batch was purged simply names none.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from sluice.records.attempts import Batch, DeliveryView

if TYPE_CHECKING:
    from sluice.store import Store, Tx
    from sluice.streams.messages import Message

Entry = tuple[str, str, str, int]  # event_id, stream, entry_id, attempt

_entries = msgspec.msgpack.Decoder(list[Entry])


async def write_batch(tx: Tx, batch: Batch, handled: Sequence[Message]) -> None:
    """The row of ``batch``'s handled entries (none when it handled nothing: every entry
    was a duplicate), written in ``tx``, the transaction of the batch's effect, whose
    processed rows name ``batch.id``."""
    if not handled:
        return
    entries = zlib.compress(
        msgspec.msgpack.encode([(m.event_id, m.stream, m.entry_id, m.deliveries) for m in handled]),
        1,
    )
    await tx.execute(
        "INSERT INTO delivery_batches (id, group_name, consumer, started_at, duration_ms,"
        " entries) VALUES (?, ?, ?, ?, ?, ?)",
        (
            batch.id,
            batch.group,
            batch.consumer,
            datetime.fromtimestamp(batch.started, UTC).isoformat(),
            round((time.time() - batch.started) * 1000, 3),
            entries,
        ),
    )


async def of_events(
    store: Store, event_ids: Sequence[str], processed: Sequence[str]
) -> dict[str, list[DeliveryView]]:
    """The handled attempts of projection groups on each of ``event_ids`` (which the
    caller keeps to at most a few hundred), found through the projections' ``processed``
    tables."""
    marks = ", ".join("?" for _ in event_ids)
    named: dict[int, set[str]] = {}
    for table in processed:
        for event_id, batch_id in await store.fetchall(
            f"SELECT event_id, batch_id FROM {table}"
            f" WHERE event_id IN ({marks}) AND batch_id IS NOT NULL",
            event_ids,
        ):
            named.setdefault(int(batch_id), set()).add(str(event_id))
    found: dict[str, list[DeliveryView]] = {}
    for row in await _batches(store, named):
        batch_id, group, consumer, at, ms, entries = row
        wanted = named[int(batch_id)]
        for event_id, stream, entry_id, attempt in _entries.decode(zlib.decompress(entries)):
            if event_id in wanted:
                view = DeliveryView(
                    str(group),
                    str(consumer),
                    stream,
                    entry_id,
                    attempt,
                    "handled",
                    None,
                    str(at),
                    float(ms),
                )
                found.setdefault(event_id, []).append(view)
    return found


async def _batches(store: Store, ids: Iterable[int]) -> list[Any]:
    wanted = sorted(ids)
    if not wanted:
        return []
    return await store.fetchall(
        "SELECT id, group_name, consumer, started_at, duration_ms, entries"
        f" FROM delivery_batches WHERE id IN ({', '.join('?' for _ in wanted)})",
        wanted,
    )
