"""The ``articles`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App
from sluice.builtin.articles.keys import ArticlesKeys
from sluice.builtin.articles.settings import ArticlesSettings

app = App(
    "articles",
    keys=ArticlesKeys,
    settings=ArticlesSettings,
    description="article view counting with a per-viewer dedupe window and day, week and"
    " month leaderboards",
)
app.aggregate("articles", key="article_id")
