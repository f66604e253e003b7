"""The links app's metrics: the redirect's visits and link cache (docs/reference/metrics.md)."""

from __future__ import annotations

from sluice.builtin.links.app import app

VISITS_RECORDED = app.counter(
    "sluice_visits_recorded", "Link visits committed by the redirect path"
)
VISITS_DROPPED = app.counter(
    "sluice_visits_dropped", "Visits dropped: the buffer was full while the database was down"
)
# The visits waiting in every live API process, added up.
VISITS_BUFFERED = app.gauge(
    "sluice_visits_buffered",
    "Visits answered and waiting in memory for the database (SLUICE_VISIT_BUFFER at most)",
)
LINK_CACHE_LOOKUPS = app.counter(
    "sluice_link_cache_lookups", "Redirect link lookups, by result (hit, miss)", ["result"]
)
