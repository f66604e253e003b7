"""The ``articles`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App

app = App(
    "articles",
    description="article view counting with a per-viewer dedupe window and day, week and"
    " month leaderboards",
)
app.aggregate("articles", key="article_id")
