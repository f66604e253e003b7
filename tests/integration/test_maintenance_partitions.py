"""Maintenance with 4 stream partitions on one Redis: trimming, reaping, status and the
archive's bound see every partition, each on its own.

Pings of twelve sources (the engine's test app, tests/engine_app) spread over the four
partitions (``SPREAD``); the group ``ping-counts`` reads and acks by hand, so a test
decides which partition lags.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.app.assembly import all_tasks, create_app
from sluice.app.testing import wait_for
from sluice.cli.stream_commands import show_status
from sluice.config import Config
from sluice.process.resources import Resources
from sluice.records.maintenance import (
    group_totals,
    passed_by_every_group,
    reap_consumers,
    status,
    trim_streams,
)
from sluice.redis_client.cluster import is_cluster
from sluice.relay.relay import Relay
from sluice.scheduler.runner import Runner
from sluice.streams.failures import Failures
from tests.engine_app import APPS
from tests.integration.archive_helpers import hot_rows, make_old
from tests.integration.helpers import post_pings
from tests.integration.metrics_helpers import ADMIN, ADMIN_TOKEN, scrape, value

# Four partitions on one Redis (the tests set them), and the same on a cluster.
pytestmark = [pytest.mark.topologies("single", "cluster"), pytest.mark.apps(APPS)]

GROUP = "ping-counts"
PINGS = 3  # per source
SOURCES = [f"a{i}" for i in range(12)]
# The partition of each source (CRC-32 of its id, modulo 4), and so of its pings.
SPREAD = {
    0: ["a4", "a6"],
    1: ["a0", "a2", "a9", "a11"],
    2: ["a5", "a7"],
    3: ["a1", "a3", "a8", "a10"],
}
Entries = list[tuple[bytes, dict[bytes, bytes]]]


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(
        stream_partitions=4,
        history_segment_events=5,
        admin_token=ADMIN_TOKEN,
    )


async def publish(resources: Resources, start_relay: Callable[..., Relay]) -> None:
    """Three pings of each source, in order (a0's are seqs 1-3, a1's 4-6...), published
    with ``ping-counts`` made on every partition's stream."""
    relay = start_relay(groups={GROUP: ["pings"]})
    for source in SOURCES:
        await post_pings(resources, source, PINGS)

    async def published() -> bool:
        return relay.published == len(SOURCES) * PINGS

    await wait_for(published)
    for partition, sources in SPREAD.items():
        stream = resources.keys.stream("pings", partition)
        assert await resources.redis.xlen(stream) == len(sources) * PINGS


async def deliver(resources: Resources, partition: int, count: int = 1000) -> Entries:
    """Up to ``count`` new entries of a partition's pings stream, to ``ping-counts``."""
    stream = resources.keys.stream("pings", partition)
    read: Any = await resources.redis.xreadgroup(GROUP, "c1", {stream: ">"}, count=count)
    entries: Entries = read[0][1] if read else []
    return entries


async def ack(resources: Resources, partition: int, entries: Entries) -> None:
    stream = resources.keys.stream("pings", partition)
    await resources.redis.xack(stream, GROUP, *[entry_id for entry_id, _ in entries])


async def test_trim_keeps_the_unacked_entries_of_each_partition(
    resources: Resources, start_relay: Callable[..., Relay]
) -> None:
    await publish(resources, start_relay)
    lagging = 3
    held = {p: await deliver(resources, p) for p in resources.keys.numbers}
    for partition, entries in held.items():
        await ack(resources, partition, entries[:2] if partition == lagging else entries)

    removed = await trim_streams(resources.redis, resources.keys, retention_s=0)

    for partition, entries in held.items():
        stream = resources.keys.stream("pings", partition)
        left: Any = await resources.redis.xrange(stream)
        kept = [entry_id for entry_id, _ in left]
        if partition == lagging:  # the two acked go; the ten pending stay
            assert (removed[stream], kept) == (2, [e for e, _ in entries[2:]])
        else:  # all acked: only the newest stays (the relay reads it)
            assert (removed[stream], kept) == (len(entries) - 1, [entries[-1][0]])


async def test_reap_removes_idle_consumers_of_every_partition(resources: Resources) -> None:
    redis, keys = resources.redis, resources.keys
    for partition in (1, 2):
        stream = keys.stream("pings", partition)
        await redis.xadd(stream, {"event_id": f"e{partition}", "data": "{}"})
        await redis.xgroup_create(stream, "g", id="0")
        read: Any = await redis.xreadgroup("g", f"c{partition}", {stream: ">"}, count=1)
        if partition == 2:
            await redis.xack(stream, "g", read[0][1][0][0])  # c2: nothing pending

    reaped = await reap_consumers(redis, keys, idle_ms=0)

    assert reaped == [f"{keys.stream('pings', 2)}/g/c2"]
    assert [c["name"] for c in await redis.xinfo_consumers(keys.stream("pings", 1), "g")] == [b"c1"]


async def fail_some(resources: Resources) -> None:
    """A retry waiting in partition 1, a retry due in partition 3 (now on its retry stream),
    a dead letter in partition 2: each of the partition's first entry."""
    for partition, delay_ms in ((1, 600_000), (3, 0), (2, None)):
        [(entry_id, raw)] = await deliver(resources, partition, count=1)
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        stream = resources.keys.stream("pings", partition)
        failures = Failures(resources.redis, resources.keys, GROUP, partition)
        if delay_ms is None:
            assert await failures.dead(stream, entry_id.decode(), fields, 5, "boom")
        else:
            assert await failures.retry(stream, entry_id.decode(), fields, 1, delay_ms)
    assert await Failures(resources.redis, resources.keys, GROUP, 3).move_due() == 1


def node_of(resources: Resources, key: str) -> str | None:
    """The primary (host:port) holding ``key`` on a cluster; None on one Redis."""
    client: Any = resources.redis
    return str(client.get_node_from_key(key).name) if is_cluster(resources.redis) else None


async def test_status_lists_each_partitions_streams(
    resources: Resources,
    start_relay: Callable[..., Relay],
    config: Config,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await publish(resources, start_relay)
    await fail_some(resources)
    keys = resources.keys

    report = await status(resources.redis, keys, resources.store)

    assert report.delayed == 1  # partition 1's; partition 3's is due and moved
    expected = [(keys.stream("pings", p), p) for p in keys.numbers]
    expected.insert(4, (keys.retry(GROUP, 3), 3))
    assert [(s.stream, s.partition) for s in report.streams] == expected
    assert [s.node for s in report.streams] == [
        node_of(resources, s.stream) for s in report.streams
    ]
    for stream in report.streams[:4]:  # the pings streams
        length = len(SPREAD[stream.partition]) * PINGS
        [group] = stream.groups
        assert (stream.length, group.group, group.pending) == (length, GROUP, 0)
        assert group.lag in (length - (stream.partition != 0), None)  # none on Redis 6.2
        assert group.dead_letters == (stream.partition == 2)
    [total] = group_totals(report)
    assert (total.group, total.pending, total.dead_letters) == (GROUP, 0, 1)

    assert await show_status(config, as_json=False) == 0
    text = capsys.readouterr().out
    for name, length, partition in (
        (keys.stream("pings", 2), 6, 2),
        (keys.retry(GROUP, 3), 1, 3),
    ):
        node = node_of(resources, name)
        where = f"  partition={partition}" + (f"  node={node}" if node else "")
        assert f"{name}  length={length}{where}\n" in text
    assert "groups, every partition together:" in text
    assert text.rstrip().endswith("dead_letters=1")
    assert await show_status(config, as_json=True) == 0
    out = capsys.readouterr().out
    shown, _ = json.JSONDecoder().raw_decode(out[out.index("{\n") :])
    assert [(s["stream"], s["partition"], s["node"]) for s in shown["streams"]] == [
        (name, partition, node_of(resources, name)) for name, partition in expected
    ]
    assert [(g["group"], g["dead_letters"]) for g in shown["groups"]] == [(GROUP, 1)]


async def test_admin_streams_and_metrics_show_the_partitions(
    resources: Resources,
    start_relay: Callable[..., Relay],
    config: Config,
    aiohttp_client: Callable[..., Awaitable[Any]],
) -> None:
    await publish(resources, start_relay)
    await fail_some(resources)
    client = await aiohttp_client(create_app(config))
    response = await client.get("/v1/admin/streams", headers=ADMIN)
    assert response.status == 200
    body = await response.json()
    pings = [s for s in body["streams"] if ":pings" in s["stream"]]
    names = [resources.keys.stream("pings", p) for p in resources.keys.numbers]
    assert [(s["stream"], s["partition"], s["node"]) for s in pings] == [
        (name, p, node_of(resources, name)) for p, name in enumerate(names)
    ]
    assert [s["groups"][0]["dead_letters"] for s in pings] == [0, 0, 1, 0]
    assert body["delayed"] == 1

    metrics = await scrape(client)
    for partition in resources.keys.numbers:
        stream = resources.keys.stream("pings", partition)
        node = node_of(resources, stream) or ""
        assert (
            value(metrics, "sluice_stream_info", stream=stream, partition=str(partition), node=node)
            == 1
        )
        assert value(metrics, "sluice_stream_length", stream=stream) == len(SPREAD[partition]) * 3
    assert value(metrics, "sluice_dead_letters", group=GROUP) == 1
    assert value(metrics, "sluice_delayed_retries") == 1


async def test_the_archive_stops_below_the_lowest_unacked_entry_of_any_partition(
    resources: Resources, start_relay: Callable[..., Relay]
) -> None:
    """Partition 1 lags most (its first unacked ping is seq 29, a9's second), partition 3
    less (seq 33, a10's last); partitions 0 and 2 are done. The archive takes the pings
    up to seq 28 only: none a group has still to handle, whichever partition holds it."""
    await publish(resources, start_relay)
    for partition in resources.keys.numbers:
        entries = await deliver(resources, partition)
        acked = {1: entries[:7], 3: entries[:-1]}.get(partition, entries)
        await ack(resources, partition, acked)

    assert await passed_by_every_group(resources.redis, resources.keys) == {"pings": 28}

    await make_old(resources.store, len(SOURCES) * PINGS)
    task = all_tasks(resources.config)["archive-history"]
    runner = Runner(resources, holder="a")
    record = await runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))
    assert record.status == "succeeded"
    hot = [row[0] for row in await hot_rows(resources.store) if row[2] == "Pinged"]
    assert hot == list(range(29, 37))
