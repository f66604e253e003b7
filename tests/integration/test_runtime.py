"""The consumer-group runtime: redelivery, poison messages, retries, dead letters, redrive."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from sluice.app.assembly import default_apps
from sluice.app.testing import wait_for
from sluice.builtin.accounts.mail.budget import BudgetUnavailable
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.streams.failures import Failures
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from tests.integration.helpers import post_views, views

pytestmark = pytest.mark.topologies("single", "cluster")


async def pending(redis: aioredis.Redis, stream: str, group: str) -> int:
    return int((await redis.xpending(stream, group))["pending"])


async def test_entries_of_a_consumer_that_never_acks_are_reclaimed(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    relay = start_relay()
    await post_views(resources, "a", 40)
    await wait_for(lambda: _published(relay, 40))
    # A consumer that reads everything and then dies without acking.
    stream = resources.keys.stream("articles", resources.keys.partition_of("a"))
    await resources.redis.xgroup_create(stream, "article-views", id="0", mkstream=True)
    got = await resources.redis.xreadgroup("article-views", "ghost", {stream: ">"}, count=1000)
    assert len(got[0][1]) == 40
    start_worker(name="survivor")  # claim_idle_ms is 1000 in tests

    async def all_counted() -> bool:
        return await views(resources, "a") == 40

    await wait_for(all_counted)
    await wait_for(lambda: _no_pending(resources.redis, stream, "article-views"))


async def _published(relay: Relay, n: int) -> bool:
    return relay.published >= n


async def _no_pending(redis: aioredis.Redis, stream: str, group: str) -> bool:
    return await pending(redis, stream, group) == 0


async def test_effect_committed_but_ack_lost_is_not_applied_twice(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    """The handler commits, then Redis fails before the ack: redelivery must dedupe."""
    inner = default_apps().groups["article-views"](resources).handler
    failed_once: list[bool] = []

    async def commit_then_lose_ack(
        deliveries: Sequence[Delivery],
    ) -> Mapping[tuple[str, str], BaseException]:
        result = await inner(deliveries)
        if not failed_once:
            failed_once.append(True)
            raise redis.exceptions.ConnectionError("connection lost before XACK")
        return result

    start_relay()
    await post_views(resources, "b", 30)
    start_worker(spec=GroupSpec("article-views", ("articles",), commit_then_lose_ack))

    async def counted() -> bool:
        return await views(resources, "b") == 30

    await wait_for(counted)
    await wait_for(
        lambda: _no_pending(
            resources.redis,
            resources.keys.stream("articles", resources.keys.partition_of("b")),
            "article-views",
        )
    )
    assert failed_once
    assert await views(resources, "b") == 30


async def test_poison_entries_reach_dead_letters_while_others_flow(
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(max_deliveries=3, retry_base_ms=20)
    stream = resources.keys.stream("articles", resources.keys.partition_of("c"))
    start_relay()
    consumer = start_worker(config=config)
    await post_views(resources, "c", 10)
    await resources.redis.xadd(stream, {"event_id": "bad-1", "seq": "0", "type": "X", "data": "{"})
    await post_views(resources, "c", 10, start=10)
    dead_key = resources.keys.dead("article-views", resources.keys.partition_of("c"))

    async def settled() -> bool:
        return await views(resources, "c") == 20 and await resources.redis.xlen(dead_key) == 1

    await wait_for(settled)
    [(_, fields)] = await resources.redis.xrange(dead_key)
    assert fields[b"event_id"] == b"bad-1"
    assert fields[b"deliveries"] == b"3"
    assert b"undecodable" in fields[b"error"]
    assert fields[b"group"] == b"article-views"
    assert consumer.counters.retried == 2
    assert await pending(resources.redis, stream, "article-views") == 0
    assert (
        await resources.redis.zcard(
            resources.keys.delayed("article-views", resources.keys.partition_of("c"))
        )
        == 0
    )


async def test_retries_go_to_the_failing_group_only(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    seen: dict[str, list[str]] = {"flaky": [], "steady": []}
    failures_left = {"n": 2}

    def recorder(name: str, fail: bool) -> GroupSpec:
        async def handle(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
            seen[name].extend(d.event.event_id for d in ds)
            if fail and failures_left["n"] > 0:
                failures_left["n"] -= 1
                return {d.message.key: RuntimeError("flaky") for d in ds}
            return {}

        return GroupSpec(name, ("articles",), handle)

    start_relay()
    flaky = start_worker(spec=recorder("flaky", fail=True), name="f")
    start_worker(spec=recorder("steady", fail=False), name="s")
    await post_views(resources, "d", 1)

    async def flaky_done() -> bool:
        return flaky.counters.handled == 1

    await wait_for(flaky_done)
    assert len(seen["flaky"]) == 3  # first delivery and two retries
    assert len(seen["steady"]) == 1  # never sees the other group's retries
    assert (
        await resources.redis.xlen(resources.keys.retry("steady", resources.keys.partition_of("d")))
        == 0
    )


async def test_redrive_sends_a_dead_letter_back_and_drop_removes_it(
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(max_deliveries=2, retry_base_ms=20)
    inner = default_apps().groups["article-views"](resources).handler
    broken = {"on": True}

    async def breaks_while_on(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        if broken["on"]:
            return {d.message.key: RuntimeError("database migration pending") for d in ds}
        return await inner(ds)

    start_relay()
    start_worker(spec=GroupSpec("article-views", ("articles",), breaks_while_on), config=config)
    await post_views(resources, "e", 2)
    dead_key = resources.keys.dead("article-views", resources.keys.partition_of("e"))

    async def both_dead() -> bool:
        return await resources.redis.xlen(dead_key) == 2

    await wait_for(both_dead)
    assert await views(resources, "e") == 0
    (first_id, _), (second_id, _) = await resources.redis.xrange(dead_key)
    broken["on"] = False
    failures = Failures(
        resources.redis, resources.keys, "article-views", resources.keys.partition_of("e")
    )
    assert await failures.redrive(first_id.decode()) is not None
    assert await failures.drop(second_id.decode())
    assert await failures.redrive("1-1") is None

    async def redriven() -> bool:
        return await views(resources, "e") == 1

    await wait_for(redriven)
    assert await resources.redis.xlen(dead_key) == 0


OUTAGES = {
    "database": ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)"),
    # As the mail handler answers each entry when Redis does not answer its budget.
    "mail-budget": BudgetUnavailable("mail budget unavailable: Connection refused"),
}


@pytest.mark.parametrize("service", OUTAGES)
async def test_an_outage_spends_no_deliveries_and_dead_letters_nothing(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    service: str,
) -> None:
    """The handler's database refuses connections (or Redis its mail budget) for many
    more calls than SLUICE_MAX_DELIVERIES (5): the worker keeps the batch and retries
    it, nothing is retried through the retry stream or dead-lettered, and every view
    counts once."""
    inner = default_apps().groups["article-views"](resources).handler
    outage = {"calls_left": 12}
    error = OUTAGES[service]

    async def down_for_a_while(
        deliveries: Sequence[Delivery],
    ) -> Mapping[tuple[str, str], BaseException]:
        if outage["calls_left"] > 0:
            outage["calls_left"] -= 1
            if service == "database":
                raise error
            return {d.message.key: error for d in deliveries}
        return await inner(deliveries)

    start_relay()
    await post_views(resources, "held", 25)
    worker = start_worker(spec=GroupSpec("article-views", ("articles",), down_for_a_while))

    async def counted() -> bool:
        return await views(resources, "held") == 25

    await wait_for(counted)
    assert outage["calls_left"] == 0
    assert (worker.counters.retried, worker.counters.dead) == (0, 0)
    assert (
        await resources.redis.xlen(
            resources.keys.dead("article-views", resources.keys.partition_of("held"))
        )
        == 0
    )
    await wait_for(
        lambda: _no_pending(
            resources.redis,
            resources.keys.stream("articles", resources.keys.partition_of("held")),
            "article-views",
        )
    )
