"""The pause watch of a worker process: what it tells its consumers, when the store
answers and when it does not; and the read block a watched consumer keeps to."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import redis.asyncio as aioredis

from sluice.consumers.consumer import Consumer
from sluice.records.pause import READ_BLOCK_MS, PauseWatch
from sluice.store import Store
from sluice.streams.engine_keys import Keys
from sluice.streams.spec import GroupSpec, RuntimeSettings


class FakeStore:
    """Answers the paused-groups query with ``rows``; raises ``error`` when one is set."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []
        self.error: Exception | None = None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[str, str]]:
        assert "paused_groups" in sql
        if self.error is not None:
            raise self.error
        return list(self.rows)


def watch_of(store: FakeStore) -> PauseWatch:
    return PauseWatch(cast(Store, store), interval_s=0.01)


async def test_a_waiting_consumer_goes_on_when_its_group_is_resumed() -> None:
    store = FakeStore()
    store.rows = [("mail", "2024-01-01T00:00:00+00:00")]
    watch = watch_of(store)
    await watch.refresh()
    assert watch.paused("mail") and not watch.paused("exports")
    stop = asyncio.Event()
    polling = asyncio.create_task(watch.run(stop))
    waiting = asyncio.create_task(watch.until_resumed("mail", stop))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    store.rows = []
    await asyncio.wait_for(waiting, 1)
    assert not watch.paused("mail")
    stop.set()
    await asyncio.wait_for(polling, 1)


async def test_a_stop_ends_the_wait_of_a_paused_group() -> None:
    store = FakeStore()
    store.rows = [("mail", "2024-01-01T00:00:00+00:00")]
    watch = watch_of(store)
    await watch.refresh()
    stop = asyncio.Event()
    waiting = asyncio.create_task(watch.until_resumed("mail", stop))
    await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(waiting, 1)
    assert watch.paused("mail")


async def test_while_the_store_does_not_answer_the_watch_keeps_what_it_knew() -> None:
    store = FakeStore()
    store.rows = [("mail", "2024-01-01T00:00:00+00:00")]
    watch = watch_of(store)
    await watch.refresh()
    store.error = ConnectionRefusedError("database down")
    stop = asyncio.Event()
    polling = asyncio.create_task(watch.run(stop))
    await asyncio.sleep(0.05)
    assert not polling.done() and watch.paused("mail")
    store.error, store.rows = None, []
    await asyncio.wait_for(watch.until_resumed("mail", asyncio.Event()), 1)
    stop.set()
    await asyncio.wait_for(polling, 1)


async def test_a_watched_consumer_blocks_at_most_READ_BLOCK_MS_in_a_read() -> None:
    async def handler(deliveries: Sequence[Any]) -> dict[Any, BaseException]:
        return {}

    spec = GroupSpec("mail", ("users",), handler)
    redis = aioredis.Redis()  # never connected: nothing is read here
    settings = RuntimeSettings(block_ms=2_000)
    watched = Consumer(spec, redis, Keys("t"), "c1", settings, pauses=watch_of(FakeStore()))
    assert watched.settings.block_ms == READ_BLOCK_MS
    assert Consumer(spec, redis, Keys("t"), "c1", settings).settings.block_ms == 2_000
    await redis.aclose()
