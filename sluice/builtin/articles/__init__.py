"""Article views (docs/reference/http-api.md): ``POST /v1/articles/{id}/views`` counts a view once
per viewer in the dedupe window; the ``article-views`` projection keeps totals and day, week and
month leaderboards (tables, and Redis sorted sets for the current periods); the
``snapshot-leaderboard`` task stores each day's top 100.

Declared on ``sluice.app`` like any app; it imports sluice's core (the HTTP helpers,
the visitor hash, the store) and no other app.
"""

from __future__ import annotations

from sluice.builtin.articles import events, projection, tasks, views  # noqa: F401  (declare)
from sluice.builtin.articles.app import app

__all__ = ["app"]
