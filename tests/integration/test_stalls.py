"""Stalled consumers (docs/guides/operate.md): one holding entries that acked none for
SLUICE_STALL_SECONDS is flagged in the status (``sluice status``, the streams route,
the page) and in ``sluice_consumers_stalled``; an idle one is not, and the flag goes
once it acks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

import pytest

from sluice.app.testing import wait_for
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.records.maintenance import status
from sluice.relay.relay import Relay
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from tests.integration.helpers import post_views

pytestmark = pytest.mark.topologies("single", "cluster")

STALL_S = 1.0


async def test_a_consumer_stuck_on_its_entries_is_flagged_until_it_acks(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def stuck(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        entered.set()
        await release.wait()
        return {}

    start_relay()
    started = time.monotonic()  # no mark of the consumer predates this
    start_worker(spec=GroupSpec("stuck", ("articles",), stuck), name="w-stuck")
    start_worker("article-views", name="w-fine")
    await post_views(resources, "a1", 3)
    await asyncio.wait_for(entered.wait(), 20)
    try:
        await _flagged_then_cleared(resources, release, started)
    finally:
        release.set()


async def _flagged_then_cleared(
    resources: Resources, release: asyncio.Event, started: float
) -> None:

    async def report_stalled() -> list[tuple[str, str]]:
        report = await status(resources.redis, resources.keys, resources.store, STALL_S)
        return [(s.group, s.consumer) for s in report.stalled]

    async def flagged() -> bool:
        return await report_stalled() == [("stuck", "w-stuck")]

    await wait_for(flagged)
    assert time.monotonic() - started >= STALL_S * 0.9  # not before its time
    report = await status(resources.redis, resources.keys, resources.store, STALL_S)
    [stall] = report.stalled
    assert stall.pending >= 1 and stall.since_ack_s is not None
    assert stall.since_ack_s >= STALL_S

    release.set()

    async def cleared() -> bool:
        return await report_stalled() == []

    await wait_for(cleared)


async def test_an_idle_consumer_with_nothing_pending_is_never_stalled(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    start_relay()
    start_worker("article-views", name="idle")
    await post_views(resources, "a1", 2)

    async def drained() -> bool:
        report = await status(resources.redis, resources.keys, resources.store, STALL_S)
        groups = [g for s in report.streams for g in s.groups if g.group == "article-views"]
        return bool(groups) and all(g.pending == 0 and g.lag == 0 for g in groups)

    await wait_for(drained)
    deadline = time.monotonic() + STALL_S * 1.5
    while time.monotonic() < deadline:  # well past the stall time, nothing is flagged
        report = await status(resources.redis, resources.keys, resources.store, STALL_S)
        assert report.stalled == []
        await asyncio.sleep(0.2)
