"""Pausing a group for real (docs/guides/operate.md): a worker process stops taking the group's
entries within 2 s of a pause asked of the API (another host, as far as it knows), stays paused when
restarted, and drains the backlog once resumed; in a worker, the batch in hand when the pause comes
finishes and is acked, and dead consumers' entries are not reclaimed until the group is resumed;
``sluice groups`` pauses, lists and resumes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from sluice.app.assembly import create_app
from sluice.app.testing import Child, sluice_command, wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources, redis_client
from sluice.records import pause
from sluice.records.pause import POLL_INTERVAL_S, READ_BLOCK_MS, PauseWatch
from sluice.relay.relay import Relay
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec, runtime_settings
from tests.integration.helpers import Running, post_views, views

GROUP = "article-views"
ARTICLE = "a1"
TOKEN = "pause-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
# A poll of the pause watch and a blocked read after it, with room for a loaded machine.
SETTLE_S = POLL_INTERVAL_S + READ_BLOCK_MS / 1000 + 0.5

Client = TestClient[web.Request, web.Application]


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(admin_token=TOKEN)


@pytest.fixture
async def api(aiohttp_client: Callable[..., Awaitable[Client]], config: Config) -> Client:
    return await aiohttp_client(create_app(config))


async def ask(api: Client, action: str, group: str = GROUP) -> None:
    response = await api.post(f"/v1/admin/groups/{group}/{action}", headers=ADMIN)
    assert response.status == 204, await response.text()


async def delivered(resources: Resources, group: str = GROUP) -> list[tuple[str, int, int]]:
    """The group's last delivered id, lag and pending count on each partition's stream."""
    seen = []
    for partition in resources.keys.numbers:
        stream = resources.keys.stream("articles", partition)
        infos: Any = await resources.redis.xinfo_groups(stream)
        [info] = [i for i in infos if i["name"].decode() == group]
        seen.append((info["last-delivered-id"].decode(), int(info["lag"]), int(info["pending"])))
    return seen


async def published(resources: Resources, count: int) -> None:
    """Until ``count`` entries are on the articles streams."""

    async def all_there() -> bool:
        keys = resources.keys
        lengths = [await resources.redis.xlen(keys.stream("articles", p)) for p in keys.numbers]
        return sum(lengths) >= count

    await wait_for(all_there)


def counted(resources: Resources, count: int) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return await views(resources, ARTICLE) == count

    return done


@contextlib.asynccontextmanager
async def producing(resources: Resources, start: int) -> AsyncIterator[list[int]]:
    """Commits a view every 20 ms while the block runs; yields the count so far.

    Stopped between commits, never cancelled: a commit cancelled while waiting for its
    answer may still have committed, and the count would then be one short: the
    drain below would wait for a total it can never reach (the likely cause of one
    failure of a full run on PostgreSQL).
    """
    made = [start]
    stop = asyncio.Event()

    async def produce() -> None:
        while not stop.is_set():
            await post_views(resources, ARTICLE, 1, start=made[0])
            made[0] += 1
            await asyncio.sleep(0.02)

    task = asyncio.create_task(produce())
    try:
        yield made
    finally:
        stop.set()
        await task


@pytest.mark.slow
async def test_a_worker_process_stops_within_2s_of_a_pause_and_resume_drains_it(
    resources: Resources,
    api: Client,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    start_relay()
    # The default 2 s block: the worker caps it while it watches for pauses.
    spawn("worker", GROUP, "--consumer", "c1", SLUICE_WORKER_BLOCK_MS="2000")
    await post_views(resources, ARTICLE, 5)
    await wait_for(counted(resources, 5))

    async with producing(resources, start=5) as made:
        await asyncio.sleep(0.3)  # entries flowing when the pause is asked for
        asked = time.monotonic()
        await ask(api, "pause")
    # Quiet now: the worker waits in a blocking read, as an idle one does.
    await asyncio.sleep(max(0.0, asked + 2.0 - time.monotonic()))
    at_2s = await delivered(resources)
    async with producing(resources, start=made[0]) as made:
        await asyncio.sleep(SETTLE_S)  # entries from 2 s on: none may be taken
    total = made[0]
    await published(resources, total)
    after = await delivered(resources)
    assert [last for last, _, _ in after] == [last for last, _, _ in at_2s], "taken after 2 s"
    waiting = sum(lag for _, lag, _ in after)
    assert waiting >= 10, "nothing was left to wait: nothing tested"
    # The work in hand finished and was acked: nothing pending, all of it counted.
    await wait_for(counted(resources, total - waiting))
    assert [pending for _, _, pending in await delivered(resources)] == [0] * len(after)

    resumed = time.monotonic()
    await ask(api, "resume")
    # Generous for a loaded CI machine (a fresh-clone run once took over 10 s here);
    # an idle one drains this backlog in well under a second.
    await wait_for(counted(resources, total), timeout=25)
    assert time.monotonic() - resumed < 20
    assert all(lag == 0 for _, lag, _ in await delivered(resources))


@pytest.mark.slow
async def test_a_paused_group_stays_paused_when_its_worker_restarts(
    resources: Resources,
    api: Client,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    start_relay()
    worker = spawn("worker", GROUP, "--consumer", "c1")
    await post_views(resources, ARTICLE, 3)
    await wait_for(counted(resources, 3))
    await ask(api, "pause")
    assert worker.terminate() == 0

    acks = resources.keys.acks(GROUP, 0)
    before = await resources.redis.hget(acks, "c1")
    await post_views(resources, ARTICLE, 7, start=3)
    await published(resources, 10)
    spawn("worker", GROUP, "--consumer", "c1")

    async def started() -> bool:  # a consumer marks its start (the stall check's mark)
        return await resources.redis.hget(acks, "c1") != before

    await wait_for(started)
    await asyncio.sleep(SETTLE_S)  # a read it would have made, had it forgotten the pause
    assert await views(resources, ARTICLE) == 3
    assert sum(lag for _, lag, _ in await delivered(resources)) == 7

    await ask(api, "resume")
    await wait_for(counted(resources, 10), timeout=10)


class Held:
    """A group handler that holds its first batch until released, recording every batch."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.batches: list[int] = []

    async def __call__(self, deliveries: Sequence[Delivery]) -> dict[Any, BaseException]:
        self.batches.append(len(deliveries))
        if len(self.batches) == 1:
            await self.release.wait()
        return {}

    @property
    def handled(self) -> int:
        return sum(self.batches)


@pytest.fixture
async def start_watched(
    resources: Resources, running: Running
) -> AsyncIterator[Callable[[GroupSpec], Awaitable[tuple[Consumer, PauseWatch]]]]:
    """Starts a consumer of ``spec`` and the pause watch of its process (polling every
    50 ms), as a worker process does: the watch read once before the consumer starts."""
    config = resources.config
    reader = redis_client(config, socket_timeout=config.worker_block_ms / 1000 + 5)

    async def start(spec: GroupSpec) -> tuple[Consumer, PauseWatch]:
        watch = PauseWatch(resources.store, interval_s=0.05)
        await watch.refresh()
        settings = runtime_settings(config)
        worker = Consumer(spec, reader, resources.keys, "w1", settings, pauses=watch)
        running.start(watch.run(running.stop))
        running.start(worker.run(running.stop))
        return worker, watch

    yield start
    await running.close()  # the consumers stop before their client closes
    await reader.aclose()


Start = Callable[[GroupSpec], Awaitable[tuple[Consumer, PauseWatch]]]


async def test_the_batch_in_hand_finishes_and_is_acked_then_nothing_is_taken(
    resources: Resources, start_watched: Start, start_relay: Callable[..., Relay]
) -> None:
    handler = Held()
    start_relay(groups={"held": ("articles",)})
    await post_views(resources, ARTICLE, 4)
    await published(resources, 4)
    _, watch = await start_watched(GroupSpec("held", ("articles",), handler))

    async def in_hand() -> bool:
        return handler.batches == [4]

    await wait_for(in_hand)
    await pause.pause(resources.store, "held")

    async def seen() -> bool:
        return watch.paused("held")

    await wait_for(seen)
    await post_views(resources, ARTICLE, 5, start=4)
    await published(resources, 9)
    handler.release.set()

    async def acked() -> bool:
        return [pending for _, _, pending in await delivered(resources, "held")] == [0]

    await wait_for(acked)
    await asyncio.sleep(SETTLE_S)
    assert handler.batches == [4]
    assert [lag for _, lag, _ in await delivered(resources, "held")] == [5]

    await pause.resume(resources.store, "held")

    async def drained() -> bool:
        return handler.handled == 9

    await wait_for(drained)


async def test_a_paused_group_reclaims_nothing_until_resumed(
    resources: Resources, start_watched: Start, start_relay: Callable[..., Relay]
) -> None:
    handler = Held()
    handler.release.set()
    start_relay(groups={"held": ("articles",)})
    await post_views(resources, ARTICLE, 3)
    await published(resources, 3)
    stream = resources.keys.stream("articles", 0)
    # A consumer that took the entries and died holding them.
    await resources.redis.xreadgroup("held", "dead", {stream: ">"}, count=10)
    await pause.pause(resources.store, "held")
    worker, _ = await start_watched(GroupSpec("held", ("articles",), handler))

    # Past claim_idle_ms (1 s in tests) and a reclaim round after it.
    await asyncio.sleep(resources.config.claim_idle_ms / 1000 + SETTLE_S)
    holders: Any = await resources.redis.xinfo_consumers(stream, "held")
    assert {c["name"].decode(): int(c["pending"]) for c in holders}.get("dead") == 3
    assert handler.handled == 0 and worker.counters.claimed == 0

    await pause.resume(resources.store, "held")

    async def reclaimed() -> bool:
        return handler.handled == 3

    await wait_for(reclaimed)
    assert worker.counters.claimed == 3


async def test_the_groups_command_pauses_lists_and_resumes(
    config: Config, resources: Resources
) -> None:
    done = await sluice_command(config, "groups", "pause", "mail")
    assert done.returncode == 0, done.stderr
    assert "mail" in await pause.paused_groups(resources.store)
    listed = await sluice_command(config, "groups", "list")
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert "paused since" in lines["mail"] and lines["exports"].split()[1] == "running"
    status = await sluice_command(config, "status")
    assert "paused groups: mail" in status.stdout
    done = await sluice_command(config, "groups", "resume", "mail")
    assert done.returncode == 0, done.stderr
    assert await pause.paused_groups(resources.store) == {}
    unknown = await sluice_command(config, "groups", "pause", "nope")
    assert unknown.returncode == 2 and "unknown group 'nope'" in unknown.stderr
