"""The relay never skips a committed event, although writers on several hosts commit
in any order (docs/guides/several-hosts.md), and publishes each aggregate's events in commit order.

On PostgreSQL a transaction that takes its sequence number before another but
commits after it is the classic way an outbox relay loses events: reading
``seq > position`` after the later commit moves the position past the earlier
number for good. The tests below build exactly that interleaving with two
stores (two hosts' connections) and a real relay.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from sluice.app.assembly import open_store
from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.relay.relay import Relay
from sluice.store import Store, Tx
from sluice.store.postgres_tx import PostgresTx
from sluice.streams.engine_keys import Keys

pytestmark = pytest.mark.topologies("single", "cluster")


@pytest.fixture
async def two_hosts(config: Config) -> AsyncIterator[tuple[Store, Store]]:
    """Two independent stores on one database, as two hosts would have."""
    first = await open_store(config)
    second = await open_store(config)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


async def published(redis: aioredis.Redis, keys: Keys, aggregate: str) -> list[tuple[int, str]]:
    """(seq, event id) of every entry of an aggregate's streams, each partition's in stream
    order (checked to be seq order), merged."""
    merged: list[tuple[int, str]] = []
    for partition in keys.numbers:
        entries: Any = await redis.xrange(keys.stream(aggregate, partition))
        mine = [(int(f[b"seq"]), f[b"event_id"].decode()) for _, f in entries]
        assert mine == sorted(mine), f"partition {partition} out of commit order"
        merged += mine
    return sorted(merged)


def hold_after_numbering(
    monkeypatch: pytest.MonkeyPatch, numbered: asyncio.Event, release: asyncio.Event
) -> Callable[[Tx], Awaitable[None]]:
    """What the transaction body of A calls after its appends: A then holds its sequence
    numbers and waits for ``release`` before it commits.

    SQLite numbers events as they are appended; PostgreSQL numbers them at the end
    of the transaction, just before COMMIT, so there A is held right after that.
    """
    original = PostgresTx.flush_events
    held: set[int] = set()

    async def flush_then_hold(tx: PostgresTx) -> Any:
        types = await original(tx)
        if id(tx) in held:
            numbered.set()
            await release.wait()
        return types

    monkeypatch.setattr(PostgresTx, "flush_events", flush_then_hold)

    async def hold(tx: Tx) -> None:
        if isinstance(tx, PostgresTx):
            held.add(id(tx))
            return
        numbered.set()
        await release.wait()

    return hold


async def test_an_earlier_number_committed_later_is_not_skipped(
    two_hosts: tuple[Store, Store],
    config: Config,
    redis: aioredis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A takes its number and stays open; B commits (or tries to); the relay runs; A
    commits; the relay publishes both, none skipped, in commit order."""
    host_a, host_b = two_hosts
    keys = Keys(config.stream_prefix)
    relay = Relay(host_a, redis, keys)
    numbered, release = asyncio.Event(), asyncio.Event()
    hold = hold_after_numbering(monkeypatch, numbered, release)
    first = LinkVisited(code="order1", visitor="a")
    second = LinkVisited(code="order1", visitor="b")

    async def transaction_a() -> None:
        async with host_a.transaction() as tx:
            await tx.append(first)
            await hold(tx)

    async def transaction_b() -> None:
        async with host_b.transaction() as tx:
            await tx.append(second)

    a = asyncio.create_task(transaction_a())
    try:
        await asyncio.wait_for(numbered.wait(), 10)
        b = asyncio.create_task(transaction_b())
        # B cannot commit ahead of A: its events would take a number after A's and be
        # visible before them. It waits for A (PostgreSQL: the history lock; SQLite: the
        # write lock), so the relay running now sees neither.
        done, _ = await asyncio.wait([b], timeout=0.5)
        assert not done
        assert await relay.run_once() == 0
        assert await published(redis, keys, "visits") == []
    finally:
        release.set()  # a failure above must not leave A open
        await asyncio.wait_for(a, 10)
    await asyncio.wait_for(b, 10)
    while await relay.run_once():
        pass
    await relay.close()
    seqs = {
        row[1]: int(row[0]) for row in await host_a.fetchall("SELECT seq, event_id FROM events")
    }
    assert seqs[first.event_id] < seqs[second.event_id]
    assert await published(redis, keys, "visits") == [
        (seqs[first.event_id], first.event_id),
        (seqs[second.event_id], second.event_id),
    ]


async def test_concurrent_writers_on_two_hosts_never_make_the_relay_skip(
    two_hosts: tuple[Store, Store], config: Config, redis: aioredis.Redis
) -> None:
    """Eight writers on two hosts commit 400 transactions in random interleavings while
    the relay runs: every event is published once, in sequence order, and of two
    events of one aggregate, one committed before the other began is published first."""
    keys = Keys(config.stream_prefix)
    relay = Relay(two_hosts[0], redis, keys, batch=7)
    spans: dict[str, tuple[str, float, float]] = {}  # event id: (code, began, committed)
    rng = random.Random(7)
    clock = asyncio.get_running_loop().time

    async def writer(n: int) -> None:
        store = two_hosts[n % 2]
        for i in range(50):
            code = f"agg{rng.randrange(4)}"
            event = LinkVisited(code=code, visitor=f"w{n}-{i}")
            began = clock()
            async with store.transaction() as tx:
                await tx.execute("SELECT 1")  # some work before the append
                await asyncio.sleep(rng.random() / 500)
                await tx.append(event)
            spans[event.event_id] = (code, began, clock())

    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    await asyncio.gather(*(writer(n) for n in range(8)))

    async def caught_up() -> bool:
        return len(await published(redis, keys, "visits")) >= 400

    await wait_for(caught_up, timeout=30, interval=0.05)
    stop.set()
    await asyncio.wait_for(running, 10)

    entries = await published(redis, keys, "visits")
    seqs = [seq for seq, _ in entries]
    assert seqs == sorted(seqs) and len(set(seqs)) == 400  # every event once, in order
    stored = await two_hosts[1].fetchall("SELECT seq FROM events ORDER BY seq")
    assert seqs == [row[0] for row in stored]
    position = {event_id: i for i, (_, event_id) in enumerate(entries)}
    out_of_order = [
        (first, then)
        for first, (code, _, committed) in spans.items()
        for then, (other, began, _) in spans.items()
        if code == other and committed < began and position[first] > position[then]
    ]
    assert out_of_order == []
