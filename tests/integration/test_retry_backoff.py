"""Retry backoff as a consumer really waits it (docs/concepts/index.md): exponential, jittered,
bounded.

docs/design/consumer.md: a failed entry comes back after ``SLUICE_RETRY_BASE_MS * 2^(n-1)`` ms
(n: the deliveries so far), jittered over the upper half of that, through the
group's delayed set, which the consumer's mover polls every ``_move_interval``.
The base here is large enough (300 ms) for the gaps between deliveries to be
measured against those bounds on a loaded machine.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise

import pytest

from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from tests.engine_app import APPS, Pinged
from tests.integration.helpers import post_pings

# A timing test: the cluster adds nothing to the backoff but its own latency under load.
pytestmark = [
    pytest.mark.topologies("single", "partitioned"),
    pytest.mark.apps(APPS),
]

BASE_MS = 300
MAX_DELIVERIES = 5
FAILING = 4  # entries that fail on every delivery: 4 gaps each, 16 in all
# What may come on top of the backoff: one poll of the mover (it moves due retries at
# most this late), then the XADD, the blocked read it wakes and the handler call.
LATENESS_S = 0.4
GROUP = "backoff-probe"


async def test_retries_come_back_after_exponential_jittered_backoff(
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(retry_base_ms=BASE_MS, max_deliveries=MAX_DELIVERIES)
    deliveries: dict[str, list[float]] = defaultdict(list)  # event id -> when delivered
    delivered: dict[str, int] = {}  # event id -> the runtime's delivery count, last seen

    async def always_fails(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        now = time.monotonic()
        failed: dict[tuple[str, str], BaseException] = {}
        for d in ds:
            assert isinstance(d.event, Pinged)
            if d.event.source == "doomed":
                deliveries[d.event.event_id].append(now)
                delivered[d.event.event_id] = d.message.deliveries
                failed[d.message.key] = RuntimeError("the mail server is down")
        return failed

    start_relay()
    consumer = start_worker(spec=GroupSpec(GROUP, ("pings",), always_fails), config=config)
    await post_pings(resources, "doomed", FAILING)
    await post_pings(resources, "fine", 3)
    dead_key = resources.keys.dead(GROUP, resources.keys.partition_of("doomed"))

    async def all_dead() -> bool:
        return await resources.redis.xlen(dead_key) == FAILING

    # The backoffs add up to at most 0.3 + 0.6 + 1.2 + 2.4 = 4.5 s per entry.
    await wait_for(all_dead, timeout=15)

    slack = consumer._move_interval() + LATENESS_S
    ceilings = [BASE_MS / 1000 * 2 ** (n - 1) for n in range(1, MAX_DELIVERIES)]
    below_ceiling = 0
    report = {
        eid: [round(b - a, 3) for a, b in pairwise(times)] for eid, times in deliveries.items()
    }
    assert len(deliveries) == FAILING
    for event_id, times in deliveries.items():
        assert len(times) == MAX_DELIVERIES, report
        assert delivered[event_id] == MAX_DELIVERIES
        for n, ((before, after), ceiling) in enumerate(
            zip(pairwise(times), ceilings, strict=True), start=1
        ):
            gap = after - before
            # Never sooner than half the backoff of delivery n (a few ms of clock rounding
            # allowed), never later than the whole of it plus one poll of the mover.
            assert ceiling / 2 - 0.005 <= gap <= ceiling + slack, (n, gap, ceiling, report)
            below_ceiling += gap < ceiling
    # Jitter: without it every gap would be the whole backoff or more. With it, a gap
    # lands below its ceiling with odds from 1/4 (the first) to nearly 1 (the last).
    assert below_ceiling >= FAILING, report
    letters = await resources.redis.xrange(dead_key)
    assert sorted(f[b"deliveries"] for _, f in letters) == [str(MAX_DELIVERIES).encode()] * FAILING
    assert (
        await resources.redis.zcard(
            resources.keys.delayed(GROUP, resources.keys.partition_of("doomed"))
        )
        == 0
    )
    assert consumer.counters.handled == 3  # the other entries went through meanwhile
