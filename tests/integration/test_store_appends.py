"""``Tx.append`` on both stores: a transaction's events, more than one statement holds
(PostgreSQL writes 500 a COPY, SQLite 500 a statement), all stored in the order they were
appended, each with its own trace id, or none of them when the transaction fails."""

from __future__ import annotations

import pytest

from sluice.events import decode
from sluice.store import Store
from tests.engine_app import Pinged, registered

registered()  # the engine's test app (tests/engine_app): its events decode


def pings(n: int, start: int = 0) -> list[Pinged]:
    return [
        Pinged(source=f"a{i}", note=f"v{i}", trace_id=f"{i:032x}") for i in range(start, start + n)
    ]


async def test_a_long_append_keeps_every_event_in_its_order(store: Store) -> None:
    appended = pings(1_201)
    async with store.transaction() as tx:
        await tx.append(*appended[:1])
        await tx.append(*appended[1:])
    stored = await store.events_after(0, 5_000)
    assert [decode(row.payload) for row in stored] == appended
    assert [row.trace_id for row in stored] == [e.trace_id for e in appended]
    assert [row.seq for row in stored] == sorted(row.seq for row in stored)


async def test_a_failed_transaction_keeps_none_of_a_long_append(store: Store) -> None:
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.append(*pings(700))
            raise RuntimeError("after the append")
    assert await store.events_after(0, 5_000) == []
    later = pings(3, start=700)
    async with store.transaction() as tx:
        await tx.append(*later)
    assert [decode(row.payload) for row in await store.events_after(0, 10)] == later
