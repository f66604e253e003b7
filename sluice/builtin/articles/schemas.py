"""Request and response bodies of the ``articles`` routes."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated

import msgspec

from sluice.builtin.articles.periods import PERIODS

VIEWER_MAX_LENGTH = 256

# The length rule is checked by the view (422), not by decoding (which would answer 400),
# so it appears here only as documentation.
Viewer = Annotated[
    str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": VIEWER_MAX_LENGTH})
]


class ViewBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    viewer: Viewer | None = None


class ViewCounted(msgspec.Struct, kw_only=True):
    counted: bool


class ArticleViews(msgspec.Struct, kw_only=True):
    article_id: str
    views: int
    as_of: datetime


class TopItem(msgspec.Struct, kw_only=True):
    article_id: str
    views: int


class TopArticles(msgspec.Struct, kw_only=True):
    period: Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(PERIODS)})]
    start: date
    items: list[TopItem]


class TopSnapshot(msgspec.Struct, kw_only=True):
    """A day's top 100, stored by the snapshot-leaderboard task after the day ended."""

    date: date
    taken_at: datetime
    items: list[TopItem]
