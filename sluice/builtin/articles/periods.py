"""Leaderboard periods: a day, a week (from Monday) and a month, in SLUICE_TIMEZONE."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

PERIODS = ("day", "week", "month")


def period_start(period: str, moment: datetime, zone: ZoneInfo) -> date:
    """First day of the period holding ``moment``, in ``zone``; weeks start on Monday."""
    return _start_of(period, moment.astimezone(zone).date())


def _start_of(period: str, local: date) -> date:
    if period == "day":
        return local
    if period == "week":
        return local - timedelta(days=local.weekday())
    if period == "month":
        return local.replace(day=1)
    raise ValueError(f"unknown period {period!r}")


def _period_end(period: str, start: date) -> date:
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(days=7)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


@lru_cache(maxsize=4096)
def _starts(local: date) -> tuple[str, str, str]:
    """The day, week and month starts holding the local date ``local``, as ISO dates."""
    day, week, month = (_start_of(period, local).isoformat() for period in PERIODS)
    return day, week, month
