"""``flow-test``: an app whose one group, ``throttled``, has flow control by tenant
(docs/guides/write-an-app.md, "Flow control"), for the tests of it in one process and
across worker processes. Its handler records in Redis what a test checks: when each
entry started, which entries were handled, and the most entries of one tenant it saw
in handling at once across every worker, and each entry's attempt.

Load it as any app: ``SLUICE_APPS=default,tests.flow_app``. The group's limits are the
declared ones unless the test's deployment sets ``SLUICE_THROTTLED_KEY_CONCURRENCY``,
``_KEY_RATE`` or ``_RATE``.
"""

from __future__ import annotations

import asyncio
import time
from typing import ClassVar

from redis.asyncio import Redis

from sluice.app import App, Event, Flow, HandlerContext

APPS = "default,tests.flow_app"

app = App("flow-test", description="work per tenant, for the flow-control tests")
# Partitioned by the item: one tenant's work spreads over every partition.
app.aggregate("works", key="item")


@app.event
class WorkQueued(Event, frozen=True, kw_only=True, tag=True):
    """Work for ``tenant`` that takes ``ms`` milliseconds."""

    aggregate: ClassVar[str] = "works"
    tenant: str
    item: str
    ms: int = 100


throttled = app.group("throttled", flow=Flow(key="tenant", concurrency=4))

# A member per entry in handling (scored by when it ends at the latest, so a killed
# worker's entries drop out), and the most members seen at once: one slot per tenant.
_ENTER = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
local n = redis.call('ZCARD', KEYS[1])
local top = tonumber(redis.call('GET', KEYS[2]) or '0')
if n > top then redis.call('SET', KEYS[2], n) end
return n
"""


def in_handling(tenant: str) -> str:
    return f"flow-test:{{{tenant}}}:in-handling"


def most_at_once(tenant: str) -> str:
    """The most entries of ``tenant`` seen in handling at once."""
    return f"flow-test:{{{tenant}}}:most"


STARTS = "flow-test:starts"  # hash: event id -> when its handler first started (unix s)
HANDLED = "flow-test:handled"  # set of the event ids handled to the end
ATTEMPTS = "flow-test:attempts"  # hash: event id -> its last attempt (ctx.attempt)


@throttled.on(WorkQueued)
async def work(event: WorkQueued, ctx: HandlerContext) -> None:
    redis: Redis = ctx.redis
    started = time.time()
    await redis.hsetnx(STARTS, event.event_id, repr(started))
    await redis.hset(ATTEMPTS, event.event_id, ctx.attempt)
    # Counted until the handler's end, or half a second past it if its worker dies.
    await redis.eval(
        _ENTER,
        2,
        in_handling(event.tenant),
        most_at_once(event.tenant),
        int(started * 1000),
        event.ms + 500,
        event.event_id,
    )
    await asyncio.sleep(event.ms / 1000)
    await redis.zrem(in_handling(event.tenant), event.event_id)
    await redis.sadd(HANDLED, event.event_id)
