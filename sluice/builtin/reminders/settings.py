"""The reminders app's settings (``SLUICE_*``, described in .env.example and
docs/reference/configuration.md)."""

from __future__ import annotations

from sluice.app import Settings


class RemindersSettings(Settings, frozen=True, kw_only=True):
    """The shortest interval between a recurring reminder's occurrences, in seconds."""

    reminder_min_interval: int = 60
