"""The one time format the app's tables are written in."""

from __future__ import annotations

from datetime import UTC, datetime


def db_time(moment: datetime) -> str:
    """A fixed-width UTC timestamp, so the database compares them as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
