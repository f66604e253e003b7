from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import pytest
from cronsim import CronSim

from sluice.scheduler import cron
from sluice.scheduler.cron import (
    CronError,
    CronSchedule,
    Schedule,
    min_interval,
    parse_cron,
    zone,
)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


def runs(expr: str, tz: str, after: datetime, count: int) -> list[datetime]:
    return parse_cron(expr, tz).next_runs(after, count)


def chained(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    moment = schedule.next_after(after)
    while moment is not None and len(found) < count:
        found.append(moment)
        moment = schedule.next_after(moment)
    return found


# --- syntax -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "first"),
    [
        ("*/5 * * * * *", utc(2026, 1, 1, 0, 0, 5)),
        ("10-40/10 0 0 * * *", utc(2026, 1, 1, 0, 0, 10)),
        ("0 15,45 9 * * *", utc(2026, 1, 1, 9, 15)),
        ("0 0 12 * jun-aug *", utc(2026, 6, 1, 12)),
        ("0 0 12 * * Sat,sun", utc(2026, 1, 3, 12)),
        ("0 0 12 * * MON-FRI/2", utc(2026, 1, 2, 12)),  # Mon, Wed, Fri; the 1st is a Thursday
        ("0 0 12 * * 7", utc(2026, 1, 4, 12)),  # 7 is Sunday
        ("0 0 12 * * 0", utc(2026, 1, 4, 12)),
        ("  0   0  12 * * *  ", utc(2026, 1, 1, 12)),
        ("0 0 0 29 2 *", utc(2028, 2, 29)),
    ],
)
def test_accepted_expressions_fire_when_expected(expr: str, first: datetime) -> None:
    assert parse_cron(expr, "UTC").next_after(utc(2026, 1, 1)) == first


def test_day_of_week_7_and_0_are_both_sunday() -> None:
    start = utc(2026, 1, 1)
    sundays = runs("0 0 0 * * 0", "UTC", start, 10)
    assert runs("0 0 0 * * 7", "UTC", start, 10) == sundays
    assert runs("0 0 0 * * SUN", "UTC", start, 10) == sundays
    assert all(day.weekday() == 6 for day in sundays)


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # The 10th or any Friday (OR); "*/1" makes the day-of-month count as unrestricted (AND).
    either = runs("0 0 0 10 * FRI", "UTC", utc(2026, 2, 1), 4)
    assert [d.day for d in either] == [6, 10, 13, 20]
    both = runs("0 0 0 */1 * FRI", "UTC", utc(2026, 2, 1), 2)
    assert [d.day for d in both] == [6, 13]


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("0 0 12 ? * MON", "Quartz syntax ('?') is not supported"),
        ("0 0 12 L * *", "Quartz syntax ('L') is not supported"),
        ("0 0 12 * * 5L", "Quartz syntax ('L') is not supported"),
        ("0 0 12 15W * *", "Quartz syntax ('W') is not supported"),
        ("0 0 12 LW * *", "Quartz syntax ('LW') is not supported"),
        ("0 0 12 * * MON#2", "Quartz syntax ('#') is not supported"),
        ("0 0 12 * * * 2026", "a seventh (year) field is not supported"),
        ("0 12 * * *", "expected six fields, seconds first: sec min hour dom mon dow; got 5"),
        ("0 0 0 12 * * * *", "got 8 field(s)"),
        ("", "empty cron expression"),
        ("   ", "empty cron expression"),
        ("@daily", "nicknames like '@daily' are not supported"),
        ("60 * * * * *", "value 60 is out of range for the second field (0-59)"),
        ("0 60 * * * *", "value 60 is out of range for the minute field (0-59)"),
        ("0 0 24 * * *", "value 24 is out of range for the hour field (0-23)"),
        ("0 0 0 0 * *", "value 0 is out of range for the day-of-month field (1-31)"),
        ("0 0 0 32 * *", "value 32 is out of range for the day-of-month field (1-31)"),
        ("0 0 0 * 0 *", "value 0 is out of range for the month field (1-12)"),
        ("0 0 0 * 13 *", "value 13 is out of range for the month field (1-12)"),
        ("0 0 0 * * 8", "value 8 is out of range for the day-of-week field (0-7)"),
        ("0 0 0-30 * * *", "value 30 is out of range for the hour field (0-23)"),
        ("0 0 0 * FOO *", "unknown name 'FOO' in the month field"),
        ("0 0 0 * * JAN", "unknown name 'JAN' in the day-of-week field"),
        ("0 0 0 * * MONDAY", "unknown name 'MONDAY' in the day-of-week field"),
        ("*/0 * * * * *", "step 0 is out of range for the second field (1-59)"),
        ("*/90 * * * * *", "step 90 is out of range for the second field (1-59)"),
        ("5-1 * * * * *", "range '5-1' in the second field goes backwards"),
        ("-5 * * * * *", "incomplete range '-5' in the second field"),
        ("1,,2 * * * * *", "empty list item in the second field '1,,2'"),
        ("x * * * * *", "unknown name 'x' in the second field"),
        ("1x * * * * *", "invalid value '1x' in the second field"),
        ("*/x * * * * *", "invalid step 'x' in the second field"),
        ("0 0 0 31 2 *", "day-of-month 31 never occurs in the given month(s)"),
    ],
)
def test_rejected_expressions_say_why(expr: str, reason: str) -> None:
    with pytest.raises(CronError) as caught:
        parse_cron(expr, "UTC")
    assert reason in str(caught.value)


def test_time_zones_are_checked() -> None:
    assert zone("Europe/Berlin").key == "Europe/Berlin"
    for bad in ("Mars/Olympus", "localtime", "Europe", "", "../etc/passwd"):
        with pytest.raises(CronError, match=r"^unknown time zone "):
            zone(bad)
    with pytest.raises(CronError, match=r"unknown time zone 'Nowhere/City'"):
        parse_cron("0 0 0 * * *", "Nowhere/City")


def test_a_schedule_is_a_frozen_value() -> None:
    schedule = parse_cron(" 0  0 4 * * * ", "Asia/Shanghai")
    assert schedule.describe() == "0 0 4 * * * Asia/Shanghai"
    assert (schedule.expr, schedule.timezone) == ("0 0 4 * * *", "Asia/Shanghai")
    assert schedule == CronSchedule("0 0 4 * * *", "Asia/Shanghai")
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.expr = "* * * * * *"  # type: ignore[misc]
    with pytest.raises(CronError):
        CronSchedule("0 0 4 * * ?", "Asia/Shanghai")
    # 04:00 in Shanghai (UTC+8) is 20:00 UTC the day before.
    assert schedule.next_after(utc(2026, 5, 1)) == utc(2026, 5, 1, 20)


def test_results_are_utc_whole_seconds_strictly_after() -> None:
    schedule = parse_cron("* * * * * *", "America/New_York")
    after = datetime(2026, 5, 1, 12, 0, 0, 500_000, tzinfo=zone("Asia/Tokyo"))
    first = schedule.next_after(after)
    assert first == utc(2026, 5, 1, 3, 0, 1)
    assert first.tzinfo is UTC
    assert first.microsecond == 0
    assert schedule.next_after(first) == first + timedelta(seconds=1)
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule.next_after(datetime(2026, 5, 1))


def test_next_runs_lists_the_coming_occurrences() -> None:
    found = runs("0 0 9 * * MON-FRI", "Europe/Berlin", utc(2026, 5, 1, 12), 5)
    # Friday the 1st is past 09:00; then Mon-Fri of the next week, 09:00 CEST = 07:00 UTC.
    assert found == [utc(2026, 5, day, 7) for day in (4, 5, 6, 7, 8)]
    assert runs("0 0 9 * * *", "UTC", utc(2026, 1, 1), 0) == []


# --- DST --------------------------------------------------------------------


def test_berlin_spring_gap_fires_once_at_the_transition() -> None:
    # 2026-03-29 02:00 CET jumps to 03:00 CEST at 01:00 UTC.
    daily = runs("0 30 2 * * *", "Europe/Berlin", utc(2026, 3, 27), 4)
    assert daily == [
        utc(2026, 3, 27, 1, 30),
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1),
        utc(2026, 3, 30, 0, 30),
    ]
    hourly = runs("0 0 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23, 30), 3)
    assert hourly == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]
    quarterly = runs("0 */15 * * * *", "Europe/Berlin", utc(2026, 3, 29, 0, 40), 3)
    # 02:00, 02:15, 02:30, 02:45 and 03:00 all collapse into 01:00 UTC.
    assert quarterly == [utc(2026, 3, 29, 0, 45), utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 15)]


def test_berlin_fall_overlap_fires_once_per_wall_time() -> None:
    # 2026-10-25 03:00 CEST falls back to 02:00 CET at 01:00 UTC; 02:xx happens twice.
    daily = runs("0 30 2 * * *", "Europe/Berlin", utc(2026, 10, 24), 3)
    assert daily == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    hourly = runs("0 0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 22, 30), 4)
    assert hourly == [
        utc(2026, 10, 24, 23),
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 2),
        utc(2026, 10, 25, 3),
    ]
    quarterly = runs("0 */15 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 50), 6)
    first_pass = [utc(2026, 10, 25, 0, m) for m in (0, 15, 30, 45)]
    assert quarterly == [*first_pass, utc(2026, 10, 25, 2), utc(2026, 10, 25, 2, 15)]


def test_asking_during_the_second_pass_of_an_overlap_skips_to_after_it() -> None:
    schedule = parse_cron("0 */15 * * * *", "Europe/Berlin")
    # 01:10 UTC is 02:10 CET, the second 02:10 of the night; 02:15 already fired.
    assert schedule.next_after(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 2)
    every_second = parse_cron("* * * * * *", "Europe/Berlin")
    assert every_second.next_after(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 2)
    assert every_second.next_after(utc(2026, 10, 25, 0, 59, 59)) == utc(2026, 10, 25, 2)


def test_new_york_spring_and_fall() -> None:
    # Spring: 2026-03-08 02:00 EST -> 03:00 EDT at 07:00 UTC.
    spring = runs("0 30 2 * * *", "America/New_York", utc(2026, 3, 7), 3)
    assert spring == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]
    minutes = runs("0 * * * * *", "America/New_York", utc(2026, 3, 8, 6, 58), 3)
    assert minutes == [utc(2026, 3, 8, 6, 59), utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 1)]
    # Fall: 2026-11-01 02:00 EDT -> 01:00 EST at 06:00 UTC; 01:30 fires once, in EDT.
    fall = runs("0 30 1 * * *", "America/New_York", utc(2026, 10, 31), 3)
    assert fall == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    hourly = runs("0 0 * * * *", "America/New_York", utc(2026, 11, 1, 4, 30), 3)
    assert hourly == [utc(2026, 11, 1, 5), utc(2026, 11, 1, 7), utc(2026, 11, 1, 8)]


def test_lord_howe_half_hour_shift() -> None:
    # Fall: 2026-04-05 02:00 (+11) -> 01:30 (+10:30) at 15:00 UTC on the 4th.
    fall = runs("0 */15 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 20), 4)
    assert fall == [
        utc(2026, 4, 4, 14, 30),
        utc(2026, 4, 4, 14, 45),
        utc(2026, 4, 4, 15, 30),
        utc(2026, 4, 4, 15, 45),
    ]
    # Spring: 2026-10-04 02:00 (+10:30) -> 02:30 (+11) at 15:30 UTC on the 3rd.
    spring = runs("0 */15 * * * *", "Australia/Lord_Howe", utc(2026, 10, 3, 15, 10), 3)
    assert spring == [utc(2026, 10, 3, 15, 15), utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 15, 45)]
    daily = runs("0 10 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 2), 3)
    assert daily == [utc(2026, 10, 2, 15, 40), utc(2026, 10, 3, 15, 30), utc(2026, 10, 4, 15, 10)]


@pytest.mark.parametrize(
    ("tz", "transition"),
    [
        ("Europe/Berlin", utc(2026, 3, 29, 1)),
        ("Europe/Berlin", utc(2026, 10, 25, 1)),
        ("America/New_York", utc(2026, 3, 8, 7)),
        ("America/New_York", utc(2026, 11, 1, 6)),
        ("Australia/Lord_Howe", utc(2026, 4, 4, 15)),
        ("Australia/Lord_Howe", utc(2026, 10, 3, 15, 30)),
    ],
)
def test_across_transitions_match_a_brute_force_walk_of_the_policy(
    tz: str, transition: datetime
) -> None:
    rng = random.Random(f"{tz}{transition}")
    for _ in range(4):
        sec_text, secs = rng.choice([("0", {0}), ("*/20", {0, 20, 40}), ("0,59", {0, 59})])
        min_text, mins = rng.choice(
            [
                ("*", set(range(60))),
                ("*/7", set(range(0, 60, 7))),
                ("0,30", {0, 30}),
                ("29-31", {29, 30, 31}),
            ]
        )
        schedule = parse_cron(f"{sec_text} {min_text} * * * *", tz)
        after = transition - timedelta(minutes=rng.randrange(30, 150))
        end = after + timedelta(hours=3)
        expected = _policy_walk(tz, after, end, secs, mins)
        walked = [t for t in schedule.next_runs(after, len(expected) + 1) if t <= end]
        assert walked == expected, (sec_text, min_text)
        assert walked == chained(schedule, after, len(expected))


def _policy_walk(
    tz: str, after: datetime, end: datetime, secs: set[int], mins: set[int]
) -> list[datetime]:
    """Second by second in UTC: a matching wall time fires the first time it is seen;
    matching wall times skipped by a gap fire at the first second after the gap."""
    zone_info = zone(tz)

    def matches(wall: datetime) -> bool:
        return wall.second in secs and wall.minute in mins

    seen: set[datetime] = set()
    fired: list[datetime] = []
    begin = after - timedelta(hours=3)  # to have seen the first pass of an overlap
    previous = begin.astimezone(zone_info).replace(tzinfo=None)
    for n in range(1, int((end - begin).total_seconds()) + 1):
        moment = begin + timedelta(seconds=n)
        wall = moment.astimezone(zone_info).replace(tzinfo=None)
        skipped = (
            previous + timedelta(seconds=k)
            for k in range(1, int((wall - previous).total_seconds()))
        )
        fires = (matches(wall) and wall not in seen) or any(matches(w) for w in skipped)
        if fires and moment > after:
            fired.append(moment)
        seen.add(wall)
        previous = wall
    return fired


# --- property: against brute force in UTC -----------------------------------


def _random_field(
    rng: random.Random, low: int, high: int, names: tuple[str, ...] = ()
) -> tuple[str, set[int]]:
    kind = rng.choice(["*", "step", "range", "list", "value", "rangestep", "name"])
    a, b = sorted(rng.sample(range(low, high + 1), 2))
    step = rng.randint(1, max(1, (high - low) // 2))
    if kind == "*":
        return "*", set(range(low, high + 1))
    if kind == "step":
        return f"*/{step}", set(range(low, high + 1, step))
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    if kind == "rangestep":
        return f"{a}-{b}/{step}", set(range(a, b + 1, step))
    if kind == "list":
        return f"{a},{b}", {a, b}
    if kind == "name" and names:
        value = rng.randint(low, min(high, low + len(names) - 1))
        name = names[value - low]
        return rng.choice([name, name.lower(), name.title()]), {value}
    return str(a), {a}


MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def _day_rule(rng: random.Random) -> tuple[str, Callable[[date], bool]]:
    dom_text, dom = _random_field(rng, 1, 31)
    mon_text, months = _random_field(rng, 1, 12, MONTH_NAMES)
    dow_text, dows = _random_field(rng, 0, 7, DAY_NAMES)
    if 7 in dows:
        dows.add(0)
    both = dom_text.startswith("*") or dow_text.startswith("*")

    def matches(day: date) -> bool:
        dom_ok, dow_ok = day.day in dom, (day.weekday() + 1) % 7 in dows
        return day.month in months and ((dom_ok and dow_ok) if both else (dom_ok or dow_ok))

    return f"{dom_text} {mon_text} {dow_text}", matches


def test_seconds_minutes_hours_match_a_brute_force_walk() -> None:
    rng = random.Random(20260329)
    for _ in range(25):
        sec_text, secs = _random_field(rng, 0, 59)
        min_text, mins = _random_field(rng, 0, 59)
        hour_text, hours = _random_field(rng, 0, 23)
        expr = f"{sec_text} {min_text} {hour_text} * * *"
        start = utc(2026, 1, 1) + timedelta(seconds=rng.randrange(2 * 365 * 86400))
        window = 4 * 3600
        expected = [
            t
            for t in (start + timedelta(seconds=s) for s in range(1, window + 1))
            if t.second in secs and t.minute in mins and t.hour in hours
        ]
        found = [
            t
            for t in runs(expr, "UTC", start, len(expected) + 1)
            if t <= start + timedelta(seconds=window)
        ]
        assert found == expected, expr


def test_days_match_a_brute_force_walk() -> None:
    rng = random.Random(7)
    start = date(2026, 1, 1)
    for _ in range(40):
        days_text, matches = _day_rule(rng)
        expr = f"0 0 0 {days_text}"
        try:
            schedule = parse_cron(expr, "UTC")
        except CronError as exc:
            assert "never occurs" in str(exc), expr
            continue
        horizon = start + timedelta(days=3 * 366)
        expected = [
            start + timedelta(days=n)
            for n in range(1, 3 * 366)
            if matches(start + timedelta(days=n))
        ]
        found = [t.date() for t in schedule.next_runs(utc(2026, 1, 1), len(expected) + 1)]
        assert [d for d in found if d < horizon] == expected, expr


# --- min_interval ---------------------------------------


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        (parse_cron("0,1 0 9 * * *", "Europe/Berlin"), 1.0),
        (parse_cron("* * * * * *", "UTC"), 1.0),
        (parse_cron("0 * * * * *", "UTC"), 60.0),
        (parse_cron("0 */15 * * * *", "UTC"), 900.0),
        (parse_cron("0 0 4 * * *", "Asia/Shanghai"), 86400.0),
        (parse_cron("0,30 0 0 1 1 *", "UTC"), 30.0),
    ],
)
def test_min_interval_finds_the_closest_occurrences(schedule: Schedule, seconds: float) -> None:
    assert min_interval(schedule, utc(2026, 3, 1, 12)) == seconds


def test_the_second_pass_of_an_overlap_is_not_walked_second_by_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Thousands of reminders call next_after; one in the repeated hour must stay cheap.
    walked: list[datetime] = []

    class Counting(CronSim):
        def __next__(self) -> datetime:
            walked.append(super().__next__())
            return walked[-1]

    monkeypatch.setattr(cron, "CronSim", Counting)
    every_second = parse_cron("* * * * * *", "Europe/Berlin")
    assert every_second.next_after(utc(2026, 10, 25, 1, 0, 1)) == utc(2026, 10, 25, 2)
    assert len(walked) < 10


def test_occurrences_end_with_the_calendar_and_rare_ones_still_have_a_gap() -> None:
    yearly = parse_cron("0 0 0 1 1 *", "UTC")
    assert yearly.next_runs(datetime(9998, 6, 1, tzinfo=UTC), 5) == [
        datetime(9999, 1, 1, tzinfo=UTC)
    ]  # then the year 10000 would come: none, not an OverflowError
    assert yearly.next_runs(datetime(9999, 6, 1, tzinfo=UTC), 5) == []
    # 29 February on a Sunday (a dow starting with * is ANDed with the day): every 28 years
    leap_sundays = parse_cron("0 0 0 29 2 */7", "UTC")
    gap = min_interval(leap_sundays, datetime(2026, 1, 1, tzinfo=UTC))  # walked 400 years
    assert gap == (datetime(2060, 2, 29) - datetime(2032, 2, 29)).total_seconds()
