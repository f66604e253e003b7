"""Consumer groups created up front: a registered group exists on its streams before the
first event is published, so trimming (which only sees groups that exist) never drops
an entry a group has not read yet, even while no worker of that group has started."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import redis.asyncio as aioredis
import redis.exceptions

from sluice.streams.engine_keys import Keys


async def ensure_group(client: aioredis.Redis, stream: str, group: str) -> None:
    """``group`` on ``stream`` (the stream made if missing), reading from its start."""
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.exceptions.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def ensure_groups(
    client: aioredis.Redis, keys: Keys, registered: Mapping[str, Iterable[str]]
) -> None:
    """Every registered group (name: the aggregates it reads) on each of its streams, in
    every partition."""
    for group, aggregates in registered.items():
        for aggregate in aggregates:
            for partition in keys.numbers:
                await ensure_group(client, keys.stream(aggregate, partition), group)
