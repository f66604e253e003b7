"""Reading the group history: one point per minute, oldest first, zeros where no worker
wrote (and ``lag`` null where none sampled it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec
import redis.asyncio as aioredis

from sluice.records.group_history.buckets import LAG, METRICS, hour_label, window
from sluice.streams.engine_keys import Keys


class Point(msgspec.Struct, kw_only=True, frozen=True):
    """One group's minute: entries handled (and acked), failed (a retry scheduled) and
    dead-lettered in it, summed over every worker; ``lag`` the entries of the group's
    streams not yet delivered to it (every stream and partition, its retries included)
    at the minute's latest sample, null when no worker sampled it (or Redis could not
    tell). ``minute`` is the minute's start, UTC."""

    minute: datetime
    handled: int
    failed: int
    dead_lettered: int
    lag: int | None


class GroupHistory(msgspec.Struct, kw_only=True, frozen=True):
    group: str
    points: list[Point]


class History(msgspec.Struct, kw_only=True, frozen=True):
    """``minutes`` points per group, the last one the current (unfinished) minute."""

    minutes: int
    groups: list[GroupHistory]


async def read_history(
    redis: aioredis.Redis, keys: Keys, groups: Sequence[str], minutes: int, now: datetime
) -> History:
    """The last ``minutes`` minutes (up to the one holding ``now``) of each of ``groups``:
    one ``HGETALL`` per group, metric and hour, in one pipeline (on a cluster, one round
    trip per primary: each group's hashes share a slot)."""
    span = window(now, minutes)
    hours = list(dict.fromkeys(hour_label(minute) for minute in span))
    places = [(group, metric, hour) for group in groups for metric in METRICS for hour in hours]
    pipe = redis.pipeline(transaction=False)
    for group, metric, hour in places:
        pipe.hgetall(keys.history(group, metric, hour))
    answers: list[dict[Any, Any]] = await pipe.execute()
    found = {
        place: {int(field): int(number) for field, number in answer.items()}
        for place, answer in zip(places, answers, strict=True)
        if answer
    }
    return History(
        minutes=minutes,
        groups=[GroupHistory(group=group, points=_points(found, group, span)) for group in groups],
    )


Found = dict[tuple[str, str, str], dict[int, int]]


def _points(found: Found, group: str, span: list[datetime]) -> list[Point]:
    def value(metric: str, minute: datetime) -> int | None:
        return found.get((group, metric, hour_label(minute)), {}).get(minute.minute)

    return [
        Point(
            minute=minute,
            handled=value("handled", minute) or 0,
            failed=value("failed", minute) or 0,
            dead_lettered=value("dead_lettered", minute) or 0,
            lag=value(LAG, minute),
        )
        for minute in span
    ]
