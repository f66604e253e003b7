"""When things run: six-field cron in an IANA zone, fixed intervals, one-shots.

Cron expressions have six fields, seconds first: ``sec min hour dom mon dow``,
with ``*``, values, ranges (``1-5``), steps (``*/5``, ``10-40/10``, ``5/10``),
lists, three-letter month and day names in any case, day of week 0-7 (0 and 7
are Sunday) and months 1-12. Day of month and day of week combine as in
Vixie/Debian cron (and so cronsim): when both are restricted a day matching
either fires (OR); when either starts with ``*`` (``*/2`` too) both must match.

cronsim walks naive wall-clock times; this module owns the DST policy and
answers in UTC. A wall time skipped by a spring-forward gap fires once, at the
transition (the first instant after the gap), and every gap time of one
transition shares that instant; a wall time that occurs twice in a fall-back
overlap fires once, at its first occurrence. Occurrences strictly increase.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import islice, pairwise, takewhile
from typing import Protocol
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

FIELDS_HINT = "six fields, seconds first: sec min hour dom mon dow"
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# Quartz's L (last), W (weekday) and LW, alone or after a number ("5L", "15W").
QUARTZ_ATOM = re.compile(r"\d*(LW|L|W)")
# Files in the zoneinfo tree that are not IANA zone names.
NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
# 400 Gregorian years: after them every date repeats on the same weekday.
GREGORIAN_CYCLE = timedelta(days=146_097)
SECOND = timedelta(seconds=1)


class CronError(ValueError):
    """A schedule that cannot be used; ``str(err)`` is the reason to show a user."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name: int = 0  # the value of names[0]


FIELDS = (
    _Field("second", 0, 59),
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, MONTHS, 1),
    _Field("day-of-week", 0, 7, DAYS, 0),
)


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones()) - NOT_ZONES


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; CronError when there is no such zone."""
    if name not in _zone_names():
        raise CronError(f"unknown time zone {name!r}")
    return ZoneInfo(name)


class Schedule(Protocol):
    def next_after(self, moment: datetime) -> datetime | None:
        """The first occurrence strictly after ``moment`` (aware), in UTC; None when no more."""
        ...

    def describe(self) -> str:
        """A short human-readable form."""
        ...


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A validated six-field cron expression in an IANA time zone."""

    expr: str
    timezone: str
    _spec: str = field(init=False, repr=False, compare=False)
    _tz: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_spec", _compile(self.expr))
        object.__setattr__(self, "_tz", zone(self.timezone))

    def next_after(self, moment: datetime) -> datetime:
        """The first occurrence strictly after ``moment`` (aware), as aware UTC."""
        for at in self._occurrences(moment):
            return at
        raise CronError(f"{self.expr!r} has no occurrence within 50 years of {moment}")

    def next_runs(
        self, after: datetime, count: int, until: datetime | None = None
    ) -> list[datetime]:
        """The next ``count`` occurrences strictly after ``after`` (up to ``until``), in UTC."""
        runs = self._occurrences(after)
        if until is not None:
            runs = takewhile(lambda at: at <= until, runs)
        return list(islice(runs, count))

    def describe(self) -> str:
        """The expression and its time zone, as a user wrote them."""
        return f"{self.expr} {self.timezone}"

    def _occurrences(self, after: datetime) -> Iterator[datetime]:
        moment = _as_utc(after)
        local = moment.astimezone(self._tz)
        start = local.replace(tzinfo=None, microsecond=0, fold=0)
        if local.fold:
            # `moment` is in the second pass of an overlap, whose wall times all
            # fired in the first pass: walk on from the end of the overlap.
            end = _overlap_end(moment, local, self._tz)
            start = end.astimezone(self._tz).replace(tzinfo=None) - SECOND
        last = moment
        walls = iter(CronSim(self._spec, start))
        while True:
            try:
                at = _wall_to_utc(next(walls), self._tz)
            except (StopIteration, OverflowError):  # no more, or past the year 9999
                return
            if at > last:  # gap times collapse into one instant
                last = at
                yield at


def parse_cron(expr: str, timezone: str) -> CronSchedule:
    """Validate ``expr`` (six fields, seconds first) in IANA zone ``timezone``; CronError if not."""
    return CronSchedule(" ".join(expr.split()), timezone)


def min_interval(schedule: Schedule, after: datetime, samples: int = 500) -> float:
    """The smallest gap in seconds between consecutive ones of the next ``samples`` occurrences.

    A cron's walk stops after 400 years, the Gregorian cycle after which its dates
    repeat: a rare schedule (29 February on a Sunday) is not walked to the year 9999.
    ``math.inf`` when fewer than two occurrences follow ``after``.
    """
    if isinstance(schedule, CronSchedule):  # one walk instead of `samples` fresh ones
        try:
            until: datetime | None = after + GREGORIAN_CYCLE
        except OverflowError:
            until = None
        runs = schedule.next_runs(after, samples, until)
    else:
        runs = []
        moment = schedule.next_after(after)
        while moment is not None and len(runs) < samples:
            runs.append(moment)
            moment = schedule.next_after(moment)
    return min(((b - a).total_seconds() for a, b in pairwise(runs)), default=math.inf)


def _as_utc(moment: datetime) -> datetime:
    if moment.utcoffset() is None:
        raise ValueError(f"a timezone-aware datetime is needed, got {moment!r}")
    return moment.astimezone(UTC)


def _wall_to_utc(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant a naive wall time fires at, under the DST policy above."""
    # fold=0 reads the wall time with the offset in force before a transition:
    # the first occurrence in an overlap, a moment past the transition in a gap.
    first = wall.replace(tzinfo=tz).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first
    before_gap = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    offset_before = before_gap.astimezone(tz).utcoffset()
    return _first_instant(
        before_gap, first, lambda u: u.astimezone(tz).utcoffset() != offset_before
    )


def _overlap_end(moment: datetime, local: datetime, tz: ZoneInfo) -> datetime:
    """The instant the overlap that ``moment`` (in its second pass) ends."""
    length = moment - local.replace(fold=0).astimezone(UTC)
    return _first_instant(moment, moment + length, lambda u: u.astimezone(tz).fold == 0)


def _first_instant(lo: datetime, hi: datetime, reached: Callable[[datetime], bool]) -> datetime:
    """The first whole second in (lo, hi] where ``reached`` holds (false at lo, true at hi)."""
    low, high = math.floor(lo.timestamp()), math.floor(hi.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if reached(datetime.fromtimestamp(middle, UTC)):
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


@lru_cache(maxsize=4096)
def _compile(expr: str) -> str:
    """Check ``expr`` with clear messages, where cronsim is lenient or terse; its spec."""
    parts = expr.split()
    if not parts:
        raise CronError(f"empty cron expression; expected {FIELDS_HINT}")
    if parts[0].startswith("@"):
        raise CronError(f"nicknames like {parts[0]!r} are not supported; expected {FIELDS_HINT}")
    for part in parts:
        _reject_quartz(part)
    if len(parts) == 7:
        raise CronError(f"a seventh (year) field is not supported; expected {FIELDS_HINT}")
    if len(parts) != 6:
        raise CronError(f"expected {FIELDS_HINT}; got {len(parts)} field(s)")
    values = [_field_values(f, part) for f, part in zip(FIELDS, parts, strict=True)]
    _check_possible(parts, values)
    spec = " ".join(_for_cronsim(f, part) for f, part in zip(FIELDS, parts, strict=True)).upper()
    try:
        CronSim(spec, datetime(2000, 1, 1))
    except CronSimError as exc:  # a case the checks above missed
        raise CronError(f"invalid cron expression {expr!r}: {exc}") from exc
    return spec


def _for_cronsim(spec: _Field, part: str) -> str:
    """``part`` with each one-value range with a step (``5-5/2``) as its value (``5``), as
    read above and by Vixie cron: cronsim reads it as ``5/2``, 5 to the field's end."""
    items = []
    for item in part.split(","):
        body, slash, _ = item.partition("/")
        first, dash, last = body.partition("-")
        single = slash and dash and _value(spec, first) == _value(spec, last)
        items.append(first if single else item)
    return ",".join(items)


def _reject_quartz(part: str) -> None:
    for token in "?#":
        if token in part:
            raise CronError(f"Quartz syntax ({token!r}) is not supported; expected {FIELDS_HINT}")
    for atom in re.split(r"[,/-]", part.upper()):
        if match := QUARTZ_ATOM.fullmatch(atom):
            token = match.group(1)
            raise CronError(f"Quartz syntax ({token!r}) is not supported; expected {FIELDS_HINT}")


def _field_values(spec: _Field, text: str) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"empty list item in the {spec.name} field {text!r}")
        values |= _item_values(spec, item)
    return values


def _item_values(spec: _Field, item: str) -> set[int]:
    body, slash, step_text = item.partition("/")
    step = 1
    if slash:
        step = _number(spec, step_text, "step")
        if not 1 <= step <= spec.high:
            raise CronError(
                f"step {step} is out of range for the {spec.name} field (1-{spec.high})"
            )
    if body == "*":
        low, high = spec.low, spec.high
    elif "-" in body:
        first, _, last = body.partition("-")
        if not (first and last):
            raise CronError(f"incomplete range {body!r} in the {spec.name} field")
        low, high = _value(spec, first), _value(spec, last)
        if high < low:
            raise CronError(f"range {body!r} in the {spec.name} field goes backwards")
    else:
        low = _value(spec, body)
        high = spec.high if slash else low
    return set(range(low, high + 1, step))


def _value(spec: _Field, text: str) -> int:
    if text.isascii() and text.isalpha():
        name = text.upper()
        if name not in spec.names:
            raise CronError(f"unknown name {text!r} in the {spec.name} field")
        return spec.names.index(name) + spec.first_name
    value = _number(spec, text, "value")
    if not spec.low <= value <= spec.high:
        raise CronError(
            f"value {value} is out of range for the {spec.name} field ({spec.low}-{spec.high})"
        )
    return value


def _number(spec: _Field, text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise CronError(f"invalid {what} {text!r} in the {spec.name} field")
    return int(text)


def _check_possible(parts: list[str], values: list[set[int]]) -> None:
    """Refuse a day of month that none of the months has, when it must match."""
    days, months = values[3], values[4]
    both_must_match = parts[3].startswith("*") or parts[5].startswith("*")
    if both_must_match and min(days) > max(DAYS_IN_MONTH[m] for m in months):
        raise CronError(f"day-of-month {min(days)} never occurs in the given month(s)")
