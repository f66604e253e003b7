"""The orders app's tests: most run the app in one event loop (``sluice_harness``: a test
takes milliseconds), the crash test runs its real processes (``sluice_spawn``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from sluice.app import Config
from sluice.app.testing import Deployment, Harness, open_deployment

from tests.shop import ADMIN_TOKEN, APPS, Shop


@pytest.fixture
async def shop(sluice_harness: Callable[..., Awaitable[Harness]]) -> Shop:
    """The app and the built-in ones in a harness, on a fresh SQLite database."""
    return Shop(await sluice_harness(APPS, admin_token=ADMIN_TOKEN))


@pytest.fixture
async def deployment(sluice_config: Callable[..., Config]) -> AsyncIterator[Deployment]:
    """A deployment for real processes (each test on SQLite and on PostgreSQL), its store
    migrated before any process starts."""
    async with open_deployment(sluice_config(APPS)) as opened:
        yield opened
