"""The flow-control scripts against a real Redis and a Redis Cluster: a key's slots are
never over its concurrency, its waiting entries leave in order, an entry parks once,
a lease that runs out frees its slot, the buckets keep their rates and keys with work
take turns (docs/guides/write-an-app.md, "Flow control")."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as aioredis

from sluice.app.testing import wait_for
from sluice.flow.limiter import Limiter
from sluice.flow.spec import Flow, Rate
from sluice.streams.engine_keys import Keys

pytestmark = pytest.mark.topologies("single", "cluster")

LEASE_MS = 60_000


@pytest.fixture
def store_kind() -> str:
    """What the cluster's config needs of a store: these tests reach none."""
    return "sqlite"


def limiter(redis: aioredis.Redis, flow: Flow, lease_ms: int = LEASE_MS) -> Limiter:
    return Limiter(redis, Keys(prefix="t"), "hooks", flow, lease_ms)


def entry(event_id: str, key: str, fresh: bool = False) -> tuple[str, str, bool]:
    return (event_id, key, fresh)


async def acquire(lim: Limiter, entries: list[tuple[str, str, bool]]) -> list[bool]:
    """``Limiter.acquire``, each entry parked as its id and nothing else."""
    return await lim.acquire(entries, lambda i: json.dumps({"id": entries[i][0], "p": 0, "f": []}))


def ids(released: list[bytes]) -> list[str]:
    return [json.loads(e)["id"] for e in released]


async def test_a_keys_slots_never_exceed_its_concurrency_across_limiters(
    redis: aioredis.Redis,
) -> None:
    flow = Flow(key="owner", concurrency=3)
    workers = [limiter(redis, flow) for _ in range(4)]
    granted = await asyncio.gather(
        *(
            acquire(w, [entry(f"e{n}-{i}", "a", fresh=True) for i in range(5)])
            for n, w in enumerate(workers)
        )
    )
    assert sum(sum(g) for g in granted) == 3
    assert await workers[0].holding("a") == 3
    assert await workers[0].waiting("a") == 17
    other = await acquire(workers[1], [entry("b1", "b")])
    assert other == [True]  # another key is not held up


async def test_waiting_entries_of_a_key_leave_in_order_one_per_freed_slot(
    redis: aioredis.Redis,
) -> None:
    flow = Flow(key="owner", concurrency=1)
    lim = limiter(redis, flow)
    assert await acquire(lim, [entry(f"e{i}", "a") for i in range(6)]) == [True] + [False] * 5
    order = []
    holder = "e0"
    for _ in range(5):
        pumped = await lim.release([(holder, "a")])
        assert len(pumped.released) == 1
        holder = ids(pumped.released)[0]
        order.append(holder)
        # A released entry read back holds its slot already.
        assert await acquire(lim, [entry(holder, "a")]) == [True]
    assert order == [f"e{i}" for i in range(1, 6)]
    assert (await lim.release([(holder, "a")])).waiting_keys == 0


async def test_an_entry_read_twice_parks_once(redis: aioredis.Redis) -> None:
    lim = limiter(redis, Flow(key="owner", concurrency=1))
    await acquire(lim, [entry("e0", "a")])
    assert await acquire(lim, [entry("e1", "a"), entry("e1", "a")]) == [False, False]
    assert await acquire(lim, [entry("e1", "a")]) == [False]
    assert await lim.waiting("a") == 1
    assert (await lim.stats())["deferred"] == 1


async def test_a_lease_that_runs_out_frees_the_slot(redis: aioredis.Redis) -> None:
    lim = limiter(redis, Flow(key="owner", concurrency=1), lease_ms=300)
    assert await acquire(lim, [entry("dead", "a"), entry("next", "a")]) == [True, False]

    async def freed() -> bool:
        return bool((await lim.pump()).released)

    await wait_for(freed, timeout=5)
    assert await lim.holding("a") == 1  # "next" holds it now
    # The dead holder's entry, reclaimed, is no holder any more: it queues.
    assert await acquire(lim, [entry("dead", "a")]) == [False]


async def test_a_kept_lease_does_not_run_out(redis: aioredis.Redis) -> None:
    lim = limiter(redis, Flow(key="owner", concurrency=1), lease_ms=2_000)
    await acquire(lim, [entry("busy", "a"), entry("next", "a")])
    until = time.monotonic() + 4.5  # past two leases, kept every twentieth of one
    while time.monotonic() < until:
        assert await lim.keep([("busy", "a")]) == 1
        assert not (await lim.pump()).released
        await asyncio.sleep(0.1)


async def test_a_key_rate_holds_with_its_burst(redis: aioredis.Redis) -> None:
    lim = limiter(redis, Flow(key="owner", rate=Rate(20, per_seconds=1)))
    granted = await acquire(lim, [entry(f"e{i}", "a") for i in range(10)])
    assert sum(granted) == 2  # the burst: a tenth of 20
    started = time.monotonic()
    got = 2
    while got < 10:
        pumped = await lim.pump()
        got += len(pumped.released)
        if pumped.due_ms is not None:
            assert 0 <= pumped.due_ms <= 50
        await asyncio.sleep(0.01)
    elapsed = time.monotonic() - started
    assert elapsed >= 8 / 20 * 0.9  # eight tokens at 20 a second


async def test_keys_take_turns_under_a_total_rate(redis: aioredis.Redis) -> None:
    flow = Flow(key="owner", total_rate=Rate(5, per_seconds=1, burst=1))
    lim = limiter(redis, flow)
    await acquire(lim, [entry("a-first", "a")])  # the one token
    assert not any(await acquire(lim, [entry(f"a{i}", "a") for i in range(1000)]))
    await acquire(lim, [entry("c0", "c"), entry("c1", "c")])
    assert await acquire(lim, [entry("b0", "b")]) == [False]
    turns: list[str] = []
    while "b0" not in turns:
        pumped = await lim.pump()
        turns += ids(pumped.released)
        await asyncio.sleep(0.02)
    # Three keys with work: b0 leaves within three turns of its arrival.
    assert turns.index("b0") < 3, turns
    assert turns[: turns.index("b0") + 1] == ["a0", "c0", "b0"][: turns.index("b0") + 1]


async def test_a_released_entry_not_put_back_is_handed_out_again(redis: aioredis.Redis) -> None:
    lim = limiter(redis, Flow(key="owner", concurrency=1))
    await acquire(lim, [entry("e0", "a"), entry("e1", "a")])
    pumped = await lim.release([("e0", "a")])
    assert ids(pumped.released) == ["e1"]
    assert await lim.stale(older_ms=60_000) == []

    async def stale() -> bool:
        return ids(await lim.stale(older_ms=100)) == ["e1"]

    await wait_for(stale, timeout=5)
    await lim.put_back(["e1"])
    await asyncio.sleep(0.15)
    assert await lim.stale(older_ms=100) == []
