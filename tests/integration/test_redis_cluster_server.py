"""The local Redis Cluster the cluster tests and benchmarks start: three primaries with a
replica each on free loopback ports, every slot served, and a killed primary's replica
promoted with the data it held."""

from __future__ import annotations

import asyncio
from pathlib import Path

from redis.asyncio.cluster import ClusterNode
from redis.asyncio.cluster import RedisCluster as ClusterClient

from sluice.embedded.redis_cluster_server import RedisCluster


async def test_a_cluster_serves_every_slot_and_survives_a_primary_killed(tmp_path: Path) -> None:
    cluster = RedisCluster(tmp_path)
    await asyncio.to_thread(cluster.start)
    try:
        host, port = cluster.seeds.split(",")[0].split(":")
        client = ClusterClient(
            startup_nodes=[ClusterNode(host, int(port))], password=cluster.password
        )
        try:
            await client.initialize()
            assert len(client.get_primaries()) == 3
            for i in range(300):
                await client.set(f"key-{i}", i)
            # Every write reached a replica before the kill (WAIT on each primary).
            for primary in client.get_primaries():
                assert await client.execute_command("WAIT", 1, 2000, target_nodes=primary) == 1
            victim = cluster.primary_nodes()[0]
            victim.kill()
            await asyncio.to_thread(cluster.wait_ready)
            assert len(cluster.primary_nodes()) == 3  # a replica took over
            values = [await client.get(f"key-{i}") for i in range(300)]
            assert values == [str(i).encode() for i in range(300)]
        finally:
            await client.aclose()
    finally:
        await asyncio.to_thread(cluster.stop)
    assert not list(cluster.live())
