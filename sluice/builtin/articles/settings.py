"""The articles app's settings (``SLUICE_*``, described in .env.example and
docs/reference/configuration.md)."""

from __future__ import annotations

from sluice.app import Settings


class ArticlesSettings(Settings, frozen=True, kw_only=True):
    """View counting and the leaderboard's snapshot."""

    view_dedupe_seconds: int = 600
    snapshot_leaderboard_cron: str = "0 5 0 * * *"
    # "": SLUICE_TIMEZONE.
    snapshot_leaderboard_timezone: str = ""
