"""What an operator sees of entries a real worker parked (``sluice worker``): a tenant's
entries beyond its limit wait, each listed with its event, type and since when it waits,
and ``sluice status`` counts them (docs/guides/operate.md, "Operate flow control")."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sluice.app.testing import Child, sluice_command, wait_for
from sluice.config import Config
from sluice.flow.view import FlowStatus, flow_status, waiting_entries
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.flow_app import APPS, WorkQueued
from tests.flow_app.waiting import FLOW

pytestmark = [pytest.mark.slow, pytest.mark.apps(APPS), pytest.mark.topologies("single")]


async def test_entries_a_worker_parked_show_with_their_events(
    config: Config,
    resources: Resources,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    start_relay()
    spawn("worker", "throttled", "--consumer", "w1")
    # Long enough that the first four are still in handling while we look.
    made = [WorkQueued(tenant="a", item=f"a-{i}", ms=30_000) for i in range(10)]
    async with resources.store.transaction() as tx:
        await tx.append(*made)
    redis, keys = resources.redis, resources.keys
    seen: list[FlowStatus] = []

    async def parked() -> bool:
        seen[:] = [await flow_status(redis, keys, "throttled", FLOW)]
        return seen[0].entries_waiting == 6 and seen[0].slots_in_use == 4

    await wait_for(parked, timeout=90)
    [report] = seen
    assert (report.keys_waiting, report.deferred_total) == (1, 6)
    page = await waiting_entries(redis, keys, "throttled", "a", 50)
    assert len(page.entries) == 6 and page.next_cursor is None
    ids = {e.event_id for e in page.entries}
    assert ids < {w.event_id for w in made}
    assert {e.type for e in page.entries} == {"WorkQueued"}
    assert all(e.waiting_since and e.deliveries == 0 for e in page.entries)
    done = await sluice_command(config, "flow", "throttled")
    assert done.returncode == 0, done.stderr
    assert "keys_waiting=1 entries_waiting=6 deferred_total=6 slots_in_use=4" in done.stdout
    assert "a  waiting=6 slots=4/4" in done.stdout
