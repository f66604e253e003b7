from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest

from sluice.builtin.articles.periods import period_start
from sluice.streams.failures import backoff_ms


@pytest.mark.parametrize(
    ("period", "expected"),
    [("day", date(2026, 3, 4)), ("week", date(2026, 3, 2)), ("month", date(2026, 3, 1))],
)
def test_periods_start_on_the_local_day_monday_and_first(period: str, expected: date) -> None:
    wednesday = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
    assert period_start(period, wednesday, ZoneInfo("UTC")) == expected


def test_periods_follow_the_configured_zone() -> None:
    # 23:30 UTC on Sunday is already Monday in Shanghai: a new day and a new week.
    moment = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)
    shanghai = ZoneInfo("Asia/Shanghai")
    assert period_start("day", moment, shanghai) == date(2026, 3, 2)
    assert period_start("week", moment, shanghai) == date(2026, 3, 2)
    assert period_start("week", moment, ZoneInfo("UTC")) == date(2026, 2, 23)


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    for deliveries, ceiling in [(1, 2000), (2, 4000), (3, 8000), (4, 16000)]:
        samples = [backoff_ms(2000, deliveries) for _ in range(200)]
        assert all(ceiling / 2 <= s <= ceiling for s in samples)
        assert len(set(samples)) > 1  # jittered
    assert backoff_ms(2000, 50) <= 10 * 60_000
