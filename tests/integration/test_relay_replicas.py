"""Three ``sluice relay`` processes against one store under traffic: one publishes at a time.

docs/design/relay.md: only the holder of the relay lock publishes; a standby takes
over once a dead leader's lock has expired (10 s), from the stored position.
The test commits events continuously on two aggregates, kills the leader with
``kill -9`` in the middle of a burst of events it needs many batches for, and
checks what a consumer would notice: every committed event is
in its stream, first occurrences in ``seq`` order, duplicates no more than the
two batches the dead leader may have published without storing their position (one
in flight, the next sent before the first's replies were read)
(two relays publishing at once would duplicate nearly everything), and the
stored position, sampled throughout, never moving backwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.app.testing import Child, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from tests.engine_app import APPS, Pinged

pytestmark = [
    pytest.mark.topologies("single", "cluster"),
    pytest.mark.apps(APPS),  # the engine's test app (tests/engine_app)
]

BATCH = 50
BURST = 5000
AGGREGATES = ("pings", "visits")
LEADING = '"relay: leading"'


class Traffic:
    """Events committed one per transaction, alternating between two aggregates."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.committed = 0
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            i = self.committed
            event = (
                Pinged(source="a", note=f"ping-{i}")
                if i % 2
                else LinkVisited(code="relay", visitor=f"visitor-{i}")
            )
            async with self.resources.store.transaction() as tx:
                await tx.append(event)
            self.committed += 1
            await asyncio.sleep(0.004)  # a steady few hundred events a second

    async def stop(self) -> None:
        self._stop.set()
        await self._task


class PositionSampler:
    """The relay position as stored, read every few milliseconds until stopped."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.samples: list[int] = []
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(await self.resources.store.position(POSITION))
            await asyncio.sleep(0.005)

    async def stop(self) -> list[int]:
        self._stop.set()
        await self._task
        return self.samples


def leaders(relays: dict[Path, Child]) -> list[Path]:
    """The logs of the live relays that have taken the lead at some point."""
    return [
        log
        for log, relay in relays.items()
        if relay.process is not None and log.exists() and LEADING in log.read_text()
    ]


async def stream_seqs(resources: Resources, aggregate: str) -> list[int]:
    """The seqs in the aggregate's streams, every partition's merged in seq order."""
    seqs: list[int] = []
    for partition in resources.keys.numbers:
        stream = resources.keys.stream(aggregate, partition)
        entries: Any = await resources.redis.xrange(stream)
        seqs += [int(fields[b"seq"]) for _, fields in entries]
    return sorted(seqs)


async def committed_seqs(resources: Resources, aggregate: str) -> list[int]:
    rows = await resources.store.fetchall(
        "SELECT seq FROM events WHERE aggregate = ? ORDER BY seq", (aggregate,)
    )
    return [int(r[0]) for r in rows]


@pytest.mark.timeout(90)
async def test_relay_replicas_publish_one_at_a_time_and_a_standby_takes_over(
    resources: Resources, spawn: Callable[..., Child], tmp_path: Path
) -> None:
    store = resources.store
    traffic = Traffic(resources)
    sampler = PositionSampler(resources)
    relays: dict[Path, Child] = {}
    for i in range(3):
        log = tmp_path / f"relay-{i}.log"
        relays[log] = spawn(
            "relay", log=log, SLUICE_RELAY_BATCH=str(BATCH), SLUICE_LOG_LEVEL="info"
        )

    async def publishing() -> bool:
        return bool(leaders(relays)) and await store.position(POSITION) >= 200

    await wait_for(publishing, timeout=20)
    [first] = leaders(relays)  # the other two stand by
    # A burst the leader needs a hundred batches for: it dies in the middle of it.
    async with store.transaction() as tx:
        await tx.append(*(Pinged(source="burst", note=f"ping-{i}") for i in range(BURST)))
    source = store.dialect.payload_field("source")
    row = await store.fetchone(
        f"SELECT MIN(seq), MAX(seq) FROM events WHERE type = 'Pinged' AND {source} = ?",
        ("burst",),
    )
    assert row is not None
    burst_first, burst_last = int(row[0]), int(row[1])

    async def mid_burst() -> bool:
        return await store.position(POSITION) >= burst_first

    await wait_for(mid_burst, interval=0.002)
    relays[first].kill()
    killed_at = await store.position(POSITION)
    assert killed_at < burst_last, "the leader had published the whole burst"

    async def taken_over() -> bool:  # after the dead leader's lock expired (10 s)
        past_burst = await store.position(POSITION) > burst_last + 100
        return bool(leaders(relays)) and past_burst

    await wait_for(taken_over, timeout=25)
    [second] = leaders(relays)
    await traffic.stop()

    async def all_published() -> bool:
        return await store.position(POSITION) == await store.max_seq()

    await wait_for(all_published)
    samples = await sampler.stop()
    assert leaders(relays) == [second], "the last standby took the lead as well"
    for log, relay in relays.items():
        if relay.process is not None:
            assert relay.terminate() == 0, log.read_text()[-2000:]

    assert samples == sorted(samples), "the stored relay position moved backwards"
    duplicates = 0
    for aggregate in AGGREGATES:
        published = await stream_seqs(resources, aggregate)
        first_seen = list(dict.fromkeys(published))
        assert first_seen == await committed_seqs(resources, aggregate), aggregate
        duplicates += len(published) - len(first_seen)
    # The dead leader's last batch, published before it could store its position.
    assert duplicates <= 2 * BATCH, f"{duplicates} events published twice"
    assert traffic.committed + BURST == await store.max_seq()
