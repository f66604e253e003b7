"""Timestamps as microseconds since the epoch, and back to the exact text they came from.

Two spellings recur in the history: the events table's ``created_at``
(``datetime.isoformat()`` of an aware UTC time, ``...T12:00:00.123456+00:00``)
and msgspec's rendering of an event's UTC datetimes (``...T12:00:00.123456Z``).
Both drop the fraction when it is zero. A text is stored as an integer only if
formatting that integer gives the very same text back; anything else (other
offsets, naive times, other precisions) stays text.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import repeat
from operator import floordiv, mod

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = 1_000_000

ISO = "+00:00"  # created_at, as the stores write it
JSON = "Z"  # msgspec's UTC datetimes


def micros(text: str, suffix: str) -> int | None:
    """``text`` as microseconds since the epoch if ``format_micros`` gives it back exactly."""
    seconds = _parse_second(text[:19])
    if seconds is None:
        return None
    rest = text[19:]
    if rest == suffix:
        return seconds * _SECOND
    digits = rest[1:7]
    if (
        rest[:1] != "."
        or rest[7:] != suffix
        or not (digits.isascii() and digits.isdigit() and len(digits) == 6)
        or digits == "000000"  # written without a fraction
    ):
        return None
    return seconds * _SECOND + int(digits)


def format_micros(value: int, suffix: str) -> str:
    """One timestamp in the spelling ``suffix`` names (``ISO`` or ``JSON``)."""
    seconds, fraction = divmod(value, _SECOND)
    prefix = _second(seconds)
    return f"{prefix}.{fraction:06d}{suffix}" if fraction else prefix + suffix


def format_column(
    values: Sequence[int], suffix: str, before: str = "", after: str = ""
) -> list[str]:
    """``format_micros`` of each value, between ``before`` and ``after``: the same texts
    at a fraction of the cost. Each distinct second is formatted once and every pass
    runs in C; a repeated value (a group commit's created_at) is formatted once."""
    distinct = set(values)
    if 2 * len(distinct) < len(values):
        texts = format_column(list(distinct), suffix, before, after)
        return list(map(dict(zip(distinct, texts, strict=True)).__getitem__, values))
    seconds = list(map(floordiv, values, repeat(_SECOND)))
    fractions = list(map(mod, values, repeat(_SECOND)))
    forms = {
        s: _escaped(f"{before}{_second(s)}.") + "%06d" + _escaped(suffix + after)
        for s in set(seconds)
    }
    out = list(map(mod, map(forms.__getitem__, seconds), fractions))
    if 0 in fractions:  # a whole second is written without a fraction
        for i, (s, f) in enumerate(zip(seconds, fractions, strict=True)):
            if not f:
                out[i] = f"{before}{_second(s)}{suffix}{after}"
    return out


def _escaped(text: str) -> str:
    return text.replace("%", "%%")


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a whole second since the epoch."""
    return (_EPOCH + timedelta(seconds=seconds)).replace(tzinfo=None).isoformat()


@functools.lru_cache(maxsize=4096)
def _parse_second(text: str) -> int | None:
    """Seconds since the epoch of ``YYYY-MM-DDTHH:MM:SS`` if ``_second`` writes it so."""
    if len(text) != 19 or not text.isascii() or text[10] != "T":
        return None
    try:
        moment = datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        return None
    seconds = (moment - _EPOCH) // timedelta(seconds=1)
    return seconds if _second(seconds) == text else None
