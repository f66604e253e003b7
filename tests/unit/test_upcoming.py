"""Reminders' next runs from a window computed earlier: the same as walking the cron now."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from sluice.builtin.reminders.upcoming import NEXT_RUNS, WINDOW_MAX, Window, window
from sluice.scheduler.cron import parse_cron

START = datetime(2026, 3, 7, 12, 0, 0, 123_000, tzinfo=UTC)
# An ordinary day, and the nights of DST changes in Berlin, New York and Lord Howe.
STARTS = [
    START,
    datetime(2026, 3, 28, 23, 0, tzinfo=UTC),
    datetime(2026, 10, 24, 23, 30, tzinfo=UTC),
    datetime(2026, 11, 1, 4, 0, 30, tzinfo=UTC),
    datetime(2026, 10, 3, 14, 0, tzinfo=UTC),
]

SCHEDULES = [
    ("0 * * * * *", "UTC"),  # every minute: a window of 16 runs
    ("30 */7 * * * *", "Europe/Berlin"),
    ("0 30 2 * * *", "Europe/Berlin"),  # in the spring-forward gap once a year
    ("0 30 1 * * *", "America/New_York"),  # in the fall-back overlap once a year
    ("0 0 9 * * MON-FRI", "Asia/Kolkata"),
    ("0 0 0 29 2 */7", "UTC"),  # 29 February on a Sunday: 2032, 2060, 2088
    ("0 0-2 0 29 2 */7", "Pacific/Auckland"),  # clusters of three, decades apart
    ("0 0 0 31 * */7", "Australia/Lord_Howe"),  # half-hour DST
]


@pytest.mark.parametrize("start", STARTS, ids=lambda s: s.strftime("%Y%m%dT%H%M"))
@pytest.mark.parametrize(("cron", "timezone"), SCHEDULES)
def test_a_window_answers_what_walking_the_cron_at_that_moment_answers(
    cron: str, timezone: str, start: datetime
) -> None:
    schedule = parse_cron(cron, timezone)
    found = window(schedule, start)
    assert NEXT_RUNS <= len(found.runs) <= WINDOW_MAX
    assert list(found.runs) == schedule.next_runs(start, len(found.runs))
    rng = random.Random(f"{cron} {timezone} {start}")
    # Moments up to the window's last run and beyond: it answers right, or not at all.
    horizon = (found.runs[-1] - start) * 1.2
    moments = [start + horizon * rng.random() for _ in range(100)] + [start, *found.runs]
    answered = 0
    for now in moments:
        runs = found.next_runs(now)
        if runs is not None:
            answered += 1
            assert runs == schedule.next_runs(now, NEXT_RUNS), now
        else:
            assert sum(run > now for run in found.runs) < NEXT_RUNS
    assert answered > 0


def test_a_window_does_not_answer_for_a_moment_before_its_start() -> None:
    found = window(parse_cron("0 * * * * *", "UTC"), START)
    assert found.next_runs(START - timedelta(seconds=1)) is None


def test_a_schedule_with_fewer_runs_left_is_complete() -> None:
    near_the_end = datetime(9999, 12, 31, 23, 58, 30, tzinfo=UTC)
    found = window(parse_cron("0 * * * * *", "UTC"), near_the_end)
    assert found.complete and len(found.runs) == 1
    assert found.next_runs(near_the_end) == list(found.runs)
    assert found.next_runs(found.runs[0]) == []


def test_a_rare_schedule_costs_only_its_first_three_runs() -> None:
    found = window(parse_cron("0 0 0 29 2 */7", "UTC"), START)
    assert [run.year for run in found.runs] == [2032, 2060, 2088]
    assert Window(START, found.runs, False).next_runs(datetime(2040, 1, 1, tzinfo=UTC)) is None
