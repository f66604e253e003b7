"""A deployment of sluice with the orders app per test: API, relay, the app's groups and a
scheduler, each a real process, on the test's own Redis and store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from sluice.app.loading import load_apps
from sluice.app.testing import Child, wait_answering
from sluice.config import Config, load_config
from sluice.embedded.redis_server import free_port
from sluice.store import open_store

from tests.shop import APPS, GROUPS, Shop

# The test process loads the app as every process of the deployment does at start: its
# event types join the codec.
load_apps(load_config({"SLUICE_APPS": APPS}))


@pytest.fixture
async def shop(
    sluice_config: Callable[..., Config], sluice_spawn: Callable[..., Child]
) -> AsyncIterator[Shop]:
    port = free_port()
    config = sluice_config(APPS, port=port)
    store = await open_store(config)  # migrated once here, before the processes start
    async with aiohttp.ClientSession() as http:
        shop = Shop(config, f"http://127.0.0.1:{port}", http, sluice_spawn, store)
        shop.start("api", SLUICE_PORT=str(port))
        try:
            await wait_answering([shop.url])
            yield shop
        finally:
            await store.close()


@pytest.fixture
def running(shop: Shop) -> Shop:
    """The shop with its relay, the app's groups and a scheduler running."""
    shop.start("relay")
    shop.start("worker", *GROUPS)
    shop.start("scheduler")
    return shop
