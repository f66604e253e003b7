"""What an operator sees of a flow group with entries waiting (docs/guides/operate.md,
"Operate flow control"): the keys and entries waiting, the slots the busy keys hold,
one key's waiting entries in order a page at a time while they leave, on one Redis
and a Redis Cluster; and the same in ``sluice status`` and ``sluice flow``."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime

import pytest

from sluice.app.testing import open_harness, sluice_command
from sluice.config import Config
from sluice.flow.limiter import Limiter
from sluice.flow.spec import Flow, Rate
from sluice.flow.view import flow_status, waiting_entries
from sluice.streams.engine_keys import Keys
from tests.flow_app import APPS
from tests.flow_app.waiting import FLOW, acquire, hold_and_park

pytestmark = pytest.mark.topologies("single", "cluster")


@dataclass
class Waiting:
    config: Config
    keys: Keys
    limiter: Limiter


@pytest.fixture
async def waiting(make_config: Callable[..., Config]) -> AsyncIterator[Waiting]:
    config = make_config(apps=APPS)
    async with open_harness(config) as harness:
        redis, keys = harness.resources.redis, harness.resources.keys
        yield Waiting(config, keys, await hold_and_park(redis, keys))


async def test_the_groups_keys_entries_and_slots_waiting(
    waiting: Waiting,
) -> None:
    limiter = waiting.limiter
    report = await flow_status(limiter.redis, waiting.keys, "throttled", FLOW)
    assert (report.keys_waiting, report.entries_waiting) == (2, 8)
    assert report.deferred_total == 8
    assert report.slots_in_use == 8
    assert report.concurrency == 4 and report.key == "tenant"
    assert [(k.key, k.waiting, k.slots_in_use) for k in report.top_keys] == [
        ("a", 6, 4),
        ("b", 2, 4),
    ]


async def test_a_keys_waiting_entries_page_in_order_while_they_leave(
    waiting: Waiting,
) -> None:
    limiter, keys = waiting.limiter, waiting.keys
    redis = limiter.redis
    first = await waiting_entries(redis, keys, "throttled", "a", 4)
    assert [e.event_id for e in first.entries] == ["a4", "a5", "a6", "a7"]
    assert (first.waiting, first.slots_in_use) == (6, 4)
    assert first.entries[0].type == "WorkQueued" and first.entries[0].seq == 7
    assert first.entries[0].waiting_since is not None
    since = datetime.fromisoformat(first.entries[0].waiting_since)
    assert abs(since.timestamp() - time.time()) < 60
    # Two of a's holders end: a4 and a5 take their slots, and leave the queue.
    released = await limiter.release([("a0", "a"), ("a1", "a")])
    assert sorted(json.loads(e)["id"] for e in released.released) == ["a4", "a5"]
    assert first.next_cursor is not None
    second = await waiting_entries(redis, keys, "throttled", "a", 4, first.next_cursor)
    assert [e.event_id for e in second.entries] == ["a8", "a9"]
    assert [e.position for e in second.entries] == [2, 3]
    assert second.next_cursor is None
    # All of the first page left too: the next page starts at the head.
    await limiter.release([("a2", "a"), ("a3", "a"), ("a4", "a"), ("a5", "a")])
    third = await waiting_entries(redis, keys, "throttled", "a", 4, first.next_cursor)
    assert third.entries == [] and third.waiting == 0


@pytest.mark.topologies("single")
async def test_sluice_status_and_sluice_flow_show_them(
    waiting: Waiting,
) -> None:
    config = waiting.config
    done = await sluice_command(config, "status")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("flow control"))
    block = lines[start:]
    assert block[1].split()[:3] == ["throttled", "key=tenant", "concurrency=4"]
    assert "keys_waiting=2 entries_waiting=8 deferred_total=8 slots_in_use=8" in block[2]
    assert block[3].split() == ["a", "waiting=6", "slots=4/4"]
    assert block[4].split() == ["b", "waiting=2", "slots=4/4"]
    done = await sluice_command(config, "flow", "throttled", "--key", "b", "--json")
    assert done.returncode == 0, done.stderr
    page = json.loads(done.stdout)
    assert [e["event_id"] for e in page["entries"]] == ["b4", "b5"]
    assert page["waiting"] == 2
    done = await sluice_command(config, "flow", "mail")
    assert done.returncode == 2
    assert (
        "no flow group 'mail'; groups with flow control: exports, imports, reports, throttled"
        in (done.stderr)
    )


async def test_the_rates_tokens_left_per_key_and_overall(waiting: Waiting) -> None:
    flow = Flow(key="tenant", rate=Rate(1, per_seconds=60, burst=2), total_rate=Rate(5, 60, 5))
    limiter = Limiter(waiting.limiter.redis, waiting.keys, "metered", flow, 60_000)
    assert await acquire(limiter, "c", 3) == [True, True, False]
    report = await flow_status(limiter.redis, waiting.keys, "metered", flow)
    assert (report.rate, report.total_rate) == ("1/60s", "5/60s")
    [c] = report.top_keys
    assert (c.key, c.waiting) == ("c", 1)
    assert c.tokens is not None and 0 <= c.tokens < 0.1  # one a minute: none back yet
    assert report.tokens is not None and 3 <= report.tokens < 3.5  # five less two, one back in 12 s
