"""What a worker or command opens: store, Redis, keys. The process's assembly
(``sluice.app.assembly``) hands it the apps' parts: the store's ``Schema``, the routes'
reserved words."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from sluice.config import Config
from sluice.redis_client.cluster import cluster_client
from sluice.redis_client.packing import packed
from sluice.store import Schema, Store, open_store
from sluice.streams.engine_keys import Keys

# What a process runs beside its requests' commands at any moment: the relay's and
# workers' loops, the link cache's follower and listener, the visit buffer's flushes.
_OWN_COMMANDS = 64


def redis_connections(config: Config) -> int:
    """How many connections to Redis (to each node of a cluster) one process may open.

    redis-py's pools refuse a command beyond their bound with ``MaxConnectionsError``
    (100 by default since redis-py 8): a burst of a thousand sign-ups then counted their
    rate limits in one process only, the replicas' shared count bypassed just when it
    matters. A request holds at most one connection at a time and at most
    ``SLUICE_MAX_CONNECTIONS`` requests are open, so this bound is never what refuses
    one; it still bounds a process's clients on the Redis server.
    """
    return config.max_connections + _OWN_COMMANDS


@dataclass(frozen=True)
class Resources:
    """What one process shares between its parts: the configuration, the store, the
    Redis client and the deployment's Redis key names (``keys``); and the words no short
    link's alias may take, each with the route that takes it (the deployment's routes
    outside /v1/: docs/guides/write-an-app.md), for a worker that checks aliases."""

    config: Config
    store: Store
    redis: aioredis.Redis
    keys: Keys
    reserved_words: Mapping[str, str] = field(default_factory=dict)


def redis_client(
    config: Config, *, socket_timeout: float = 5.0, retry: bool = True
) -> aioredis.Redis:
    """A client for ``config.redis_url``, or for the cluster of ``config.redis_cluster_nodes``.

    With ``retry``, a command that fails on a dead connection runs once more on
    a fresh one (a pooled connection to a restarted Redis fails once); on a
    cluster, after reading the slot map again (to the new primary after a
    failover). That is safe for the relay and workers: a repeated XADD is a
    duplicate consumers dedupe, and XACK and the retry/dead-letter scripts are
    idempotent. The API does without: a repeated ``SET NX`` of the view dedupe
    would report a view it had just counted as already seen. (A cluster client
    without retry still reads the slot map again before its next command.)
    """
    if config.cluster:
        return cluster_client(
            config,
            socket_timeout=socket_timeout,
            retry=retry,
            max_connections=redis_connections(config),
        )
    if not config.redis_url:
        raise RuntimeError("SLUICE_REDIS_URL is not set and no embedded Redis was started")
    client = aioredis.Redis.from_url(
        config.redis_url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=2.0,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=1 if retry else 0),
        retry_on_error=[RedisConnectionError] if retry else [],
        max_connections=redis_connections(config),
    )
    pool = client.connection_pool
    pool.connection_class = packed(pool.connection_class)  # the URL's TCP, TLS or socket
    return client


def keys_for(config: Config) -> Keys:
    """The keys of ``config``'s deployment: its prefix, partitions and, on a cluster, tags."""
    return Keys(config.stream_prefix, config.partitions, tagged=config.cluster)


@asynccontextmanager
async def open_resources(
    config: Config, schema: Schema, reserved_words: Mapping[str, str] | None = None
) -> AsyncIterator[Resources]:
    store = await open_store(config, schema)
    redis = redis_client(config)
    try:
        yield Resources(config, store, redis, keys_for(config), reserved_words or {})
    finally:
        await redis.aclose()
        await store.close()
