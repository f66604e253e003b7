"""Helpers for the integration tests: article views and pings committed, views read back, background
tasks a test starts. Plain code, imported by the tests; ``tests/integration/conftest.py``
keeps only fixtures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from sluice.app.testing import patience
from sluice.builtin.articles.events import ArticleViewed
from sluice.process.resources import Resources
from tests.engine_app import Pinged


async def post_views(resources: Resources, article_id: str, n: int, *, start: int = 0) -> None:
    """Commit ``n`` views of one article, one transaction each, as the API does."""
    for i in range(start, start + n):
        async with resources.store.transaction() as tx:
            await tx.append(ArticleViewed(article_id=article_id, viewer=f"viewer-{i}"))


async def post_pings(resources: Resources, source: str, n: int, *, start: int = 0) -> None:
    """Commit ``n`` pings of the engine's test app (tests/engine_app) from ``source``, one
    transaction each; the test's config loads that app (``tests.engine_app.APPS``)."""
    for i in range(start, start + n):
        async with resources.store.transaction() as tx:
            await tx.append(Pinged(source=source, note=f"ping-{i}"))


async def pings_counted(resources: Resources, source: str) -> int:
    """The pings from ``source`` the engine's test app's ``ping-counts`` projection holds."""
    row = await resources.store.fetchone(
        "SELECT pings FROM engine_ping_counts WHERE source = ?", (source,)
    )
    return int(row[0]) if row else 0


async def views(resources: Resources, article_id: str) -> int:
    row = await resources.store.fetchone(
        "SELECT views FROM article_views WHERE article_id = ?", (article_id,)
    )
    return int(row[0]) if row else 0


class Running:
    """Background tasks started by a test, stopped at teardown."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, coro: Awaitable[None]) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def close(self) -> None:
        """Stop every task and wait for it; a second call does nothing."""
        self.stop.set()
        tasks, self.tasks = self.tasks, []
        gathered = asyncio.gather(*tasks, return_exceptions=True)
        results = await asyncio.wait_for(gathered, patience(30))
        for result in results:
            if isinstance(result, BaseException):
                raise result
