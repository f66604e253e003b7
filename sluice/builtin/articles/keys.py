"""The articles app's Redis keys (the strings the core's ``Keys`` gave them before: the
dedupe marks and leaderboards in Redis keep working)."""

from __future__ import annotations

from sluice.app import RedisKeys


class ArticlesKeys(RedisKeys):
    """View dedupe marks and leaderboards."""

    __slots__ = ()

    def view_seen(self, article_id: str, viewer_digest: str) -> str:
        """Set while a viewer's view of an article counts once (SLUICE_VIEW_DEDUPE_SECONDS)."""
        return f"{self.prefix}:seen:{article_id}:{viewer_digest}"

    def top(self, period: str, start: str) -> str:
        """The leaderboard of one period (day, week, month) starting at ``start``."""
        return f"{self.prefix}:top:{period}:{start}"
