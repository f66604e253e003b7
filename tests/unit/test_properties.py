"""Property tests: the event codec round trip, and the cron parser against a reference.

The cron expressions are drawn as structured items (values, ranges, steps, lists,
names) and rendered to text, so the reference knows each field's set of values
without parsing: the parser under test never checks itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sluice.events import EVENT_TYPES, Event, decode, encode
from sluice.scheduler.cron import CronError, parse_cron

# Derandomized: CI runs the same examples every time (a failure there is a real change, not
# a new draw); no example database left in the work tree.
FAST = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# --- the event codec ---------------------------------------------------------------

moments = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
_SCALARS: dict[type[msgspec.inspect.Type], st.SearchStrategy[Any]] = {
    msgspec.inspect.StrType: st.text(),
    msgspec.inspect.BoolType: st.booleans(),
    msgspec.inspect.IntType: st.integers(-(2**63), 2**63 - 1),
    msgspec.inspect.DateTimeType: moments,
    msgspec.inspect.NoneType: st.none(),
}


def _values(kind: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    if isinstance(kind, msgspec.inspect.UnionType):
        return st.one_of(*(_values(member) for member in kind.types))
    if isinstance(kind, msgspec.inspect.VarTupleType):
        return st.lists(_values(kind.item_type), max_size=5).map(tuple)
    if isinstance(kind, msgspec.inspect.StructType):  # LinkCreated.rules: Rule, When
        return st.builds(kind.cls, **{f.name: _values(f.type) for f in kind.fields})
    if isinstance(kind, msgspec.inspect.LiteralType):  # When.device, When.os
        return st.sampled_from(kind.values)
    if isinstance(kind, msgspec.inspect.StrType) and kind.pattern is not None:  # When.country
        return st.from_regex(kind.pattern, fullmatch=True)
    if isinstance(kind, msgspec.inspect.StrType) and kind.max_length is not None:  # Rule.url
        return st.text(max_size=kind.max_length)
    if isinstance(kind, msgspec.inspect.RawType):  # JobDue.payload: a JSON document
        return st.deferred(lambda: json_documents).map(
            lambda v: msgspec.Raw(msgspec.json.encode(v))
        )
    if type(kind) not in _SCALARS:
        raise AssertionError(f"no strategy for {kind!r}: teach test_properties.py the new type")
    return _SCALARS[type(kind)]


json_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def _events(cls: type[Event]) -> st.SearchStrategy[Event]:
    """Any instance of ``cls``: every field drawn from its type, defaults too."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return st.builds(cls, **{f.name: _values(f.type) for f in info.fields})


any_event = st.sampled_from(sorted(EVENT_TYPES)).flatmap(lambda name: _events(EVENT_TYPES[name]))


@FAST
@given(any_event)
def test_every_event_round_trips(event: Event) -> None:
    decoded = decode(encode(event))
    assert type(decoded) is type(event)
    assert decoded == event


@FAST
@given(any_event, st.dictionaries(st.text(), st.from_type(int) | st.text() | st.none()))
def test_unknown_fields_are_ignored(event: Event, extra: dict[str, Any]) -> None:
    """A newer producer's extra fields do not stop an older consumer."""
    payload = msgspec.json.decode(encode(event))
    payload.update({k: v for k, v in extra.items() if k not in payload})
    assert decode(msgspec.json.encode(payload)) == event


@FAST
@given(any_event, st.sampled_from(sorted(EVENT_TYPES)))
def test_the_tag_selects_the_type(event: Event, other: str) -> None:
    """The payload names its type; under another type's tag it is that type or refused."""
    payload = msgspec.json.decode(encode(event))
    assert payload["type"] == type(event).__name__
    payload["type"] = other
    try:
        decoded = decode(msgspec.json.encode(payload))
    except msgspec.ValidationError:
        return  # a field the other type requires is missing, or has another type
    assert type(decoded) is EVENT_TYPES[other]


# --- cron: expressions drawn with the values they stand for ---------------------------


@dataclass(frozen=True)
class Field:
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name: int = 0


SECOND, MINUTE, HOUR = Field(0, 59), Field(0, 59), Field(0, 23)
DAY_OF_MONTH = Field(1, 31)
MONTH = Field(
    1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1
)
DAY_OF_WEEK = Field(0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), 0)
FIELDS = (SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)

Item = tuple[str, frozenset[int]]


@st.composite
def _number(draw: st.DrawFn, spec: Field, low: int | None = None) -> tuple[str, int]:
    """A value of the field, as a number or (where the field has one) a name in any case."""
    value = draw(st.integers(spec.low if low is None else low, spec.high))
    index = value - spec.first_name
    if spec.names and 0 <= index < len(spec.names) and draw(st.booleans()):
        name = spec.names[index]
        cased = "".join(c.lower() if draw(st.booleans()) else c for c in name)
        return cased, value
    return str(value), value


@st.composite
def _item(draw: st.DrawFn, spec: Field) -> Item:
    kind = draw(st.sampled_from(("*", "*/s", "v", "a-b", "a-b/s", "v/s")))
    step = draw(st.integers(1, spec.high))
    if kind == "*":
        return "*", frozenset(range(spec.low, spec.high + 1))
    if kind == "*/s":
        return f"*/{step}", frozenset(range(spec.low, spec.high + 1, step))
    text, first = draw(_number(spec))
    if kind == "v":
        return text, frozenset({first})
    if kind == "v/s":
        return f"{text}/{step}", frozenset(range(first, spec.high + 1, step))
    last_text, last = draw(_number(spec, low=first))
    if kind == "a-b":
        return f"{text}-{last_text}", frozenset(range(first, last + 1))
    return f"{text}-{last_text}/{step}", frozenset(range(first, last + 1, step))


@st.composite
def _field(draw: st.DrawFn, spec: Field, max_items: int = 3) -> Item:
    items = draw(st.lists(_item(spec), min_size=1, max_size=max_items))
    return ",".join(text for text, _ in items), frozenset().union(*(v for _, v in items))


@dataclass(frozen=True)
class Expr:
    """A cron expression and the reference's reading of it."""

    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (7 folded into 0)
    both_must_match: bool  # day of month or day of week starts with "*"

    def day_matches(self, day: date) -> bool:
        """Vixie cron: with both day fields restricted, either one matching is enough."""
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays
        return in_month and in_week if self.both_must_match else in_month or in_week

    def matches(self, wall: datetime) -> bool:
        return (
            self.day_matches(wall.date())
            and wall.hour in self.hours
            and wall.minute in self.minutes
            and wall.second in self.seconds
        )


@st.composite
def expressions(draw: st.DrawFn, hours: st.SearchStrategy[Item] | None = None) -> Expr:
    parts = [draw(_field(spec)) for spec in FIELDS]
    if hours is not None:
        parts[2] = draw(hours)
    texts = [text for text, _ in parts]
    weekdays = frozenset(d % 7 for d in parts[5][1])
    return Expr(
        " ".join(texts),
        parts[0][1],
        parts[1][1],
        parts[2][1],
        parts[3][1],
        parts[4][1],
        weekdays,
        texts[3].startswith("*") or texts[5].startswith("*"),
    )


def reference_next(expr: Expr, after: datetime, max_years: int = 50) -> datetime:
    """The first whole second strictly after ``after`` (naive or aware) that ``expr`` matches,
    walking day by day and, in a matching day, through its hours, minutes and seconds."""
    start = after.replace(microsecond=0) + timedelta(seconds=1)
    hours, minutes, seconds = sorted(expr.hours), sorted(expr.minutes), sorted(expr.seconds)
    day = start.date()
    for _ in range(max_years * 366):
        if expr.day_matches(day):
            # On the first day only times from `start` on count.
            earliest = start.time() if day == start.date() else time()
            for hour in (h for h in hours if h >= earliest.hour):
                for minute in minutes:
                    for second in seconds:
                        at = time(hour, minute, second)
                        if at >= earliest:
                            return datetime.combine(day, at, start.tzinfo)
        day += timedelta(days=1)
    raise AssertionError(f"{expr.text!r} matches nothing within {max_years} years of {after}")


def _parsed(expr: Expr, zone: str) -> Any:
    try:
        return parse_cron(expr.text, zone)
    except CronError as exc:
        # Only refusal allowed: a day of month that none of the months has, when it must match.
        longest = max((29 if m == 2 else 30 if m in (4, 6, 9, 11) else 31) for m in expr.months)
        assert expr.both_must_match and min(expr.days) > longest, (expr.text, str(exc))
        assume(False)


utc_moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31), timezones=st.just(UTC)
)


@FAST
@given(expressions(), utc_moments)
def test_cron_in_utc_agrees_with_the_reference(expr: Expr, after: datetime) -> None:
    assert _parsed(expr, "UTC").next_after(after) == reference_next(expr, after)


# --- cron across DST: Europe/Berlin ------------------------------------------------

BERLIN = ZoneInfo("Europe/Berlin")


def _transitions(year: int) -> list[datetime]:
    """Both of a year's transitions in Berlin: 01:00 UTC on the last Sunday of March, October."""
    out = []
    for month in (3, 10):
        last = date(year, month, 31)
        last -= timedelta(days=(last.weekday() + 1) % 7)
        out.append(datetime.combine(last, time(1), UTC))
    return out


# Start times a few hours around a transition, where the trouble is, or anywhere.
near_transitions = st.builds(
    lambda year, which, offset: _transitions(year)[which] + timedelta(seconds=offset),
    st.integers(2020, 2035),
    st.integers(0, 1),
    st.integers(-4 * 3600, 2 * 3600),
)
berlin_moments = near_transitions | utc_moments
# Hours biased to the transitions' wall times (02:00-03:00 is skipped in March, repeated
# in October).
dst_hours = st.one_of(
    _field(HOUR),
    st.sampled_from(("2", "1-3", "2,3", "*", "1/1", "2-2")).map(
        lambda text: (text, _hours_of(text))
    ),
)


def _hours_of(text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        body, _, step = item.partition("/")
        low, _, high = body.partition("-")
        first = 0 if body == "*" else int(low)
        last = 23 if body == "*" or (step and not high) else int(high or low)
        values.update(range(first, last + 1, int(step or 1)))
    return frozenset(values)


def _gap_walls(at: datetime) -> list[datetime] | None:
    """If ``at`` is the first instant after a spring-forward gap: the gap's wall times."""
    before = (at - timedelta(seconds=1)).astimezone(BERLIN)
    after = at.astimezone(BERLIN)
    if after.utcoffset() == before.utcoffset():
        return None
    first = before.replace(tzinfo=None) + timedelta(seconds=1)
    length = int((after.replace(tzinfo=None) - first).total_seconds())
    return [first + timedelta(seconds=s) for s in range(length)]


@settings(FAST, max_examples=150)
@given(expressions(hours=dst_hours), berlin_moments)
def test_cron_across_dst_is_increasing_skips_no_gap_and_fires_each_wall_time_once(
    expr: Expr, after: datetime
) -> None:
    runs = _parsed(expr, "Europe/Berlin").next_runs(after, 12)
    assert runs
    assert after < runs[0]
    assert all(a < b for a, b in pairwise(runs))
    walls = [run.astimezone(BERLIN) for run in runs]
    # A wall time repeated by a fall-back fires once, at its first occurrence.
    assert not any(wall.fold for wall in walls)
    assert len({wall.replace(tzinfo=None) for wall in walls}) == len(walls)
    for run, wall in zip(runs, walls, strict=True):
        naive = wall.replace(tzinfo=None)
        if expr.matches(naive):
            continue
        # Not a matching wall time: only a gap's matching wall time fires, and then at the
        # instant the gap ends, never at a time that does not exist.
        gap = _gap_walls(run)
        assert gap is not None, (expr.text, run)
        assert any(expr.matches(skipped) for skipped in gap), (expr.text, run)


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        # The examples from sluice/scheduler/cron.py's policy, as fixed points of the above.
        ("0 30 2 * * *", "2026-03-29T00:00:00+00:00", "2026-03-29T01:00:00+00:00"),
        ("0 30 2 * * *", "2026-10-25T00:00:00+00:00", "2026-10-25T00:30:00+00:00"),
        ("0 0 0 13 * FRI", "2026-01-01T00:00:00+00:00", "2026-01-01T23:00:00+00:00"),
    ],
)
def test_known_berlin_occurrences(expr: str, after: str, expected: str) -> None:
    """Anchors the properties: gap -> transition instant, overlap -> first pass, OR rule."""
    got = parse_cron(expr, "Europe/Berlin").next_after(datetime.fromisoformat(after))
    assert got == datetime.fromisoformat(expected)


def test_a_one_value_range_with_a_step_is_that_value() -> None:
    """Found by the reference property: cronsim reads ``5-5/2`` as ``5/2`` (5, 7, 9...)."""
    after = datetime(2026, 1, 1, tzinfo=UTC)
    runs = parse_cron("5-5/2 0 0 7-7/1 * *", "UTC").next_runs(after, 2)
    assert runs == [
        datetime(2026, 1, 7, 0, 0, 5, tzinfo=UTC),
        datetime(2026, 2, 7, 0, 0, 5, tzinfo=UTC),
    ]
