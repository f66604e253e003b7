"""The events of the ``articles`` app."""

from __future__ import annotations

from typing import ClassVar

from sluice.app import Event
from sluice.builtin.articles.app import app


@app.event
class ArticleViewed(Event, frozen=True, kw_only=True, tag=True):
    """A view of an article was counted (``POST /v1/articles/{article_id}/views``): not
    made for a viewer already counted within ``SLUICE_VIEW_DEDUPE_SECONDS``."""

    aggregate: ClassVar[str] = "articles"
    article_id: str
    viewer: str  # user id, the given viewer, or a keyed hash of IP + User-Agent
