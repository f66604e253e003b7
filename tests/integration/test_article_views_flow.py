"""Views committed to the store reach the projection exactly once."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import asyncpg
import pytest

from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.integration.faults_helpers import settle
from tests.integration.helpers import post_views, views

pytestmark = pytest.mark.topologies("single", "cluster")


async def test_committed_views_are_counted_exactly(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    start_relay()
    start_worker()
    await post_views(resources, "hot", 250)
    await post_views(resources, "cold", 3)

    # Exact once everything is published and acked: a late extra count would show.
    await settle(resources, resources.redis, "hot", 250)
    assert await views(resources, "cold") == 3


async def test_a_failed_commit_leaves_the_store_usable(resources: Resources) -> None:
    """A transaction whose COMMIT fails is rolled back, not left open on the connection."""
    async with resources.store.transaction() as tx:
        await tx.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        await tx.execute(
            "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
    integrity = (sqlite3.IntegrityError, asyncpg.exceptions.IntegrityConstraintViolationError)
    with pytest.raises(integrity):
        async with resources.store.transaction() as tx:
            await tx.execute("INSERT INTO child VALUES (42)")  # fails only at COMMIT
    await post_views(resources, "after", 1)
    assert await resources.store.max_seq() == 1
    assert await resources.store.fetchone("SELECT COUNT(*) FROM child") == (0,)
