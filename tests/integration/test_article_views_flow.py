"""Views committed to the store reach the projection exactly once."""

from __future__ import annotations

from collections.abc import Callable

from sluice.resources import Resources
from sluice.streams.consumer import Consumer
from sluice.streams.relay import Relay
from tests.integration.conftest import post_views, views, wait_for


async def test_committed_views_are_counted_exactly(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    start_relay()
    start_worker()
    await post_views(resources, "hot", 250)
    await post_views(resources, "cold", 3)

    async def drained() -> bool:
        return await views(resources, "hot") == 250 and await views(resources, "cold") == 3

    await wait_for(drained)
