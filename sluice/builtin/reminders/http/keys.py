"""The reminders app's aiohttp state, behind typed keys."""

from __future__ import annotations

from aiohttp import web

from sluice.builtin.reminders.upcoming import NextRuns

# Reminders' next runs: cached windows, and the one worker thread for cron work.
UPCOMING = web.AppKey("upcoming", NextRuns)
