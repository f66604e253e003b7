"""The Redis Cluster client (``SLUICE_REDIS_CLUSTER_NODES``), and the few operations
that differ on a cluster: grouping keys by slot, reading the slot map again.

redis-py's asyncio ``RedisCluster``, with two guards against races of redis-py 8.1
found under sluice's failover test (see ``_Cluster`` and ``_GuardedConnection``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.crc import key_slot

from sluice.config import Config
from sluice.redis_client.packing import PackedConnection


def cluster_client(
    config: Config, *, socket_timeout: float, retry: bool, max_connections: int
) -> aioredis.Redis:
    """A client of the cluster of ``config.redis_cluster_nodes`` (see ``redis_client``),
    with at most ``max_connections`` to each node."""
    client = _Cluster(
        startup_nodes=[ClusterNode(host, port) for host, port in config.cluster_seeds],
        password=config.redis_password,
        socket_timeout=socket_timeout,
        socket_connect_timeout=2.0,
        health_check_interval=15,
        # The partitions of the live primaries go on while a dead one's replica takes over.
        require_full_coverage=False,
        max_connections=max_connections,
        # Counts the retries after a connection error, CLUSTERDOWN or an uncovered slot;
        # each rereads the slot map. MOVED and ASK are followed whatever it says.
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=1 if retry else 0),
    )
    # Every node's connections, the seeds' and those of nodes found later alike.
    client.connection_kwargs["connection_class"] = _GuardedConnection
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = _GuardedConnection
    # Not a subclass of Redis, but it takes every command sluice sends with the same
    # signature; the few cluster-only calls go through the helpers below.
    return cast(aioredis.Redis, client)


class _Cluster(RedisCluster):
    """redis-py's cluster client, whose first commands run one at a time.

    Commands sent at once to a client that has not read the slot map yet all wait for
    the first one to read it, and then failed now and then ("Connection closed by
    server", a connection without its writer) as the map's bookkeeping closed
    connections the others had just opened (redis-py 8.1; 57 of 160 first commands in
    ten tries, none once the client was initialized). So until it is, they queue.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._first_commands = asyncio.Lock()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize:
            async with self._first_commands:
                return await super().execute_command(*args, **kwargs)
        return await super().execute_command(*args, **kwargs)


class _GuardedConnection(PackedConnection):
    """A cluster connection that writes only while its transport is open.

    When a command fails on a node, redis-py 8.1's cluster client disconnects that
    node's idle connections while other tasks may be taking them from the pool; a write
    on one then fails with ``AttributeError`` (no writer) instead of ``ConnectionError``,
    which neither the client's retry nor any outage handler expects, and a worker's
    consumer died of it in a failover (the same leak as redis/redis-py#4287, fixed after
    8.1 by #4288). Raised here, the ``OSError`` becomes redis-py's ``ConnectionError``.
    """

    # Every write of a connection with a socket timeout (all of sluice's) comes here.
    async def _send_packed_command(self, command: Iterable[bytes]) -> None:
        writer = self._writer
        if writer is None or writer.transport.is_closing():
            raise OSError("the connection was closed while in use")
        writer.writelines(command)
        await writer.drain()


def is_cluster(redis: aioredis.Redis) -> bool:
    """Whether ``redis`` is a Redis Cluster client (from ``redis_client``)."""
    client: object = redis  # typed as a Redis wherever it is passed
    return isinstance(client, RedisCluster)


def slot_groups(redis: aioredis.Redis, keys: Iterable[str]) -> list[list[str]]:
    """``keys`` in groups that one command or script may touch together, in their order:
    one group per hash slot on a cluster, all of them in one on a single Redis."""
    if not is_cluster(redis):
        group = list(keys)
        return [group] if group else []
    groups: dict[int, list[str]] = {}
    for key in keys:
        groups.setdefault(key_slot(key.encode()), []).append(key)
    return list(groups.values())


async def refresh_topology(redis: aioredis.Redis) -> None:
    """On a cluster, read the slot map again. A command that fails on a dead node does
    that by itself; a pub/sub connection does not: it would go on connecting to the
    slot's owner as last known, dead since."""
    client: object = redis
    if isinstance(client, RedisCluster):
        await client.initialize()  # the first time: the nodes, the slots, the command table
        await client.nodes_manager.initialize()
