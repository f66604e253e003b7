"""The events of the ``articles`` app."""

from __future__ import annotations

from typing import ClassVar

from sluice.app import Event
from sluice.builtin.articles.app import app


@app.event
class ArticleViewed(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "articles"
    article_id: str
    viewer: str  # user id, the given viewer, or a keyed hash of IP + User-Agent
