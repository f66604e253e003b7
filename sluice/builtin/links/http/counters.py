"""The links app's request-path counters, published to ``/metrics`` once a second by the
core (``sluice.http.metrics_route.publish_counters``): link cache hits and misses, visits
recorded, dropped and buffered."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from sluice.app.advanced import PUBLISHERS
from sluice.builtin.links.http.keys import LINK_CACHE, VISITS
from sluice.builtin.links.metrics import (
    LINK_CACHE_LOOKUPS,
    VISITS_BUFFERED,
    VISITS_DROPPED,
    VISITS_RECORDED,
)


class _Published:
    """What was added to the shared counters so far (they take differences)."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.hits = self.misses = self.visits = self.dropped = 0

    def publish(self) -> None:
        cache, visits = self.app[LINK_CACHE], self.app[VISITS]
        LINK_CACHE_LOOKUPS.labels("hit").inc(cache.hits - self.hits)
        LINK_CACHE_LOOKUPS.labels("miss").inc(cache.misses - self.misses)
        VISITS_RECORDED.inc(visits.committed - self.visits)
        VISITS_DROPPED.inc(visits.dropped - self.dropped)
        VISITS_BUFFERED.set(visits.buffered)
        self.hits, self.misses, self.visits = cache.hits, cache.misses, visits.committed
        self.dropped = visits.dropped


async def publish_counters(app: web.Application) -> AsyncIterator[None]:
    """After the link cache and the visit writer exist (``api_context`` order)."""
    app[PUBLISHERS].append(_Published(app).publish)
    yield
