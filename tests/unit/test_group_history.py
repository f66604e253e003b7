"""The group history's buckets and the sampler's bookkeeping, on a fake clock: which
minute and hour a sample lands in, when its hash expires, what is kept while Redis is
away (``tests/integration/test_history_sampler.py`` runs it against Redis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

import redis.asyncio as aioredis

from sluice.records.group_history.buckets import (
    HOURS_KEPT,
    MAX_MINUTES,
    RETENTION,
    Counts,
    expire_at,
    hour_label,
    minute_of,
    window,
)
from sluice.records.group_history.sampler import HistorySampler
from sluice.streams.engine_keys import Keys
from sluice.streams.spec import Counters

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_moment_falls_in_its_utc_minute_and_hour() -> None:
    moment = datetime(2026, 3, 1, 13, 59, 59, 999_999, tzinfo=UTC)
    assert minute_of(moment) == datetime(2026, 3, 1, 13, 59, tzinfo=UTC)
    paris = datetime(2026, 3, 1, 14, 5, 30, tzinfo=timezone(timedelta(hours=1)))
    assert minute_of(paris) == datetime(2026, 3, 1, 13, 5, tzinfo=UTC)
    assert hour_label(minute_of(paris)) == "2026030113"


def test_every_minute_of_an_hour_expires_together_a_day_after_the_hour() -> None:
    first, last = NOON, NOON + timedelta(minutes=59)
    assert expire_at(first) == expire_at(last)
    # The hour's last minute is still there 24 hours on; the next hour's first is later.
    assert expire_at(last) > (last + RETENTION).timestamp()
    assert expire_at(NOON + timedelta(hours=1)) == expire_at(first) + 3600
    # A group holds at most HOURS_KEPT hours of one metric: 24 h back, the margin, now.
    alive = [h for h in range(-30, 1) if expire_at(NOON + timedelta(hours=h)) > NOON.timestamp()]
    assert len(alive) == HOURS_KEPT == 26


def test_the_window_ends_with_the_current_minute_oldest_first() -> None:
    now = NOON + timedelta(seconds=42)
    assert window(now, 3) == [NOON - timedelta(minutes=2), NOON - timedelta(minutes=1), NOON]
    day = window(now, MAX_MINUTES)
    assert len(day) == 1440 and day[0] == NOON - timedelta(hours=24, minutes=-1)


@dataclass
class FakeConsumer:
    group: str
    counters: Counters = field(default_factory=Counters)
    streams: list[str] = field(default_factory=list)


class Clock:
    def __init__(self) -> None:
        self.now = NOON

    def __call__(self) -> datetime:
        return self.now


def sampler(consumers: list[FakeConsumer], clock: Clock) -> HistorySampler:
    # Never connects: _take alone is exercised here.
    return HistorySampler(aioredis.Redis(), Keys(), consumers, clock=clock)


def test_deltas_go_to_the_minute_they_were_taken_in_and_add_up_until_written() -> None:
    clock = Clock()
    mail, views = FakeConsumer("mail"), FakeConsumer("article-views")
    other_partition = FakeConsumer("article-views")
    s = sampler([mail, views, other_partition], clock)

    views.counters.handled, other_partition.counters.handled = 3, 2
    mail.counters.retried = 1
    s._take(minute_of(clock()))
    clock.now += timedelta(seconds=70)
    views.counters.handled += 1
    mail.counters.dead = 1
    s._take(minute_of(clock()))
    s._take(minute_of(clock()))  # nothing new: nothing added

    later = NOON + timedelta(minutes=1)
    assert s.unwritten == {
        "article-views": {NOON: Counts(handled=5), later: Counts(handled=1)},
        "mail": {NOON: Counts(failed=1), later: Counts(dead_lettered=1)},
    }


def test_kept_deltas_older_than_a_day_are_dropped() -> None:
    clock = Clock()
    consumer = FakeConsumer("mail")
    s = sampler([consumer], clock)
    consumer.counters.handled = 4
    s._take(minute_of(clock()))
    clock.now += RETENTION - timedelta(minutes=1)
    s._take(minute_of(clock()))
    assert s.unwritten == {"mail": {NOON: Counts(handled=4)}}
    clock.now += timedelta(minutes=1)
    s._take(minute_of(clock()))
    assert s.unwritten == {}
