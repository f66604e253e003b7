"""A rebuild counts article views from the stored payloads without making events: the
same counts, per local day and article, as the live projection's count of the events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.articles.projection import _payload_views_by_day, _views_by_day
from sluice.events import decode

ZONES = ("UTC", "Europe/Berlin", "Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns")
moments = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)
# Most payloads are written in UTC ("...Z"); one written with another offset counts too.
offsets = st.sampled_from(
    [None, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=3))]
)


@given(
    views=st.lists(st.tuples(moments, st.integers(0, 5), offsets), max_size=60),
    zone=st.sampled_from(ZONES),
)
def test_payload_counts_are_the_event_counts(
    views: list[tuple[datetime, int, timezone | None]], zone: str
) -> None:
    events = [
        ArticleViewed(
            article_id=f"a{n}",
            viewer="v",
            occurred_at=at if offset is None else at.astimezone(offset),
        )
        for at, n, offset in views
    ]
    payloads = [msgspec.json.encode(e) for e in events]
    decoded = [decode(p) for p in payloads]
    array = b"[" + b",".join(payloads) + b"]"
    assert _payload_views_by_day(array, ZoneInfo(zone)) == _views_by_day(decoded, ZoneInfo(zone))


def test_a_minute_straddling_local_midnight_is_counted_on_each_side() -> None:
    # 22:59:59 and 23:00:00 UTC are 23:59:59 and 00:00:00 in Berlin (winter).
    zone = ZoneInfo("Europe/Berlin")
    before = datetime(2026, 1, 10, 22, 59, 59, 999_999, tzinfo=UTC)
    after = datetime(2026, 1, 10, 23, 0, tzinfo=UTC)
    payloads = [
        msgspec.json.encode(ArticleViewed(article_id="a", viewer="v", occurred_at=at))
        for at in (before, after)
    ]
    counts = _payload_views_by_day(b"[" + b",".join(payloads) + b"]", zone)
    assert counts == {
        (before.astimezone(zone).date(), "a"): 1,
        (after.astimezone(zone).date(), "a"): 1,
    }
    assert len(counts) == 2
