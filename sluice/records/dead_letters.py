"""Dead letters as an operator sees them: listed, found by id, for the CLI and the admin API.

Each group keeps its dead letters in a stream of its own per partition
(``Keys.dead``), so a stream entry id is unique within one (group, partition)
only. The public id of a dead letter is its entry id (``1700000000000-0``) with
one partition, as in release 1; with several it names the partition first:
``p3-1700000000000-0`` (letters, digits and dashes only, so it fits a URL path
as it is). A bare entry id is still taken with several partitions and looked
up in each of them. Moving entries back (redrive) and deleting them (drop) is
``Failures``' work; ``redrive_matching`` sends back all of some groups' dead letters
(of one event type, or all), in every partition.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import redis.asyncio as aioredis

from sluice.streams.engine_keys import Keys
from sluice.streams.failures import Failures

_ENTRY_ID = re.compile(r"(\d{1,20})-(\d{1,20})")
_DEAD_ID = re.compile(r"(?:p(\d{1,5})-)?((\d{1,20})-(\d{1,20}))")
_U64 = 2**64
_NEVER = datetime.min.replace(tzinfo=UTC)
ID_FORMS = "an entry id (1700000000000-0), or p<partition>-<entry id> (p3-1700000000000-0)"


class DeadLetter(msgspec.Struct, kw_only=True, frozen=True):
    """One dead letter; ``stream`` is the aggregate stream the event came from."""

    id: str
    group: str
    partition: int
    stream: str
    event_id: str
    event_type: str
    deliveries: int
    error: str
    failed_at: datetime | None


@dataclass(frozen=True)
class DeadId:
    """A dead letter's id as given: its entry id, and its partition when named."""

    entry: str
    partition: int | None


@dataclass(frozen=True)
class Place:
    """Where one dead letter is: its group's dead letters in one partition."""

    group: str
    partition: int
    entry: str

    def public_id(self, keys: Keys) -> str:
        """The dead letter's id as an operator sees it (``public_id``)."""
        return public_id(self.entry, self.partition, keys.partitions)


def is_entry_id(text: str) -> bool:
    """Whether ``text`` is a full stream entry id (``ms-seq``) Redis would accept."""
    match = _ENTRY_ID.fullmatch(text)
    return match is not None and all(int(part) < _U64 for part in match.groups())


def public_id(entry_id: str, partition: int, partitions: int) -> str:
    """The id an operator sees: the entry id, prefixed by ``p<partition>-`` with several."""
    return entry_id if partitions == 1 else f"p{partition}-{entry_id}"


def parse_dead_id(text: str, partitions: int) -> DeadId:
    """The entry id and partition of a public id; ValueError saying what is wrong."""
    match = _DEAD_ID.fullmatch(text)
    if match is None or not is_entry_id(match[2]):
        raise ValueError(f"{text!r} is not a dead letter id: expected {ID_FORMS}")
    if match[1] is None:
        return DeadId(match[2], None)
    partition = int(match[1])
    if partition >= partitions:
        raise ValueError(
            f"{text!r} names partition {partition}, but there are {partitions}"
            f" (p0 to p{partitions - 1})"
        )
    return DeadId(match[2], partition)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _failed_at(raw: str) -> datetime | None:
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def _letter(keys: Keys, place: Place, raw: Mapping[bytes, bytes]) -> DeadLetter:
    fields = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
    deliveries = fields.get("deliveries", "")
    return DeadLetter(
        id=place.public_id(keys),
        group=place.group,
        partition=place.partition,
        stream=fields.get("origin", ""),
        event_id=fields.get("event_id", ""),
        event_type=fields.get("type", ""),
        deliveries=int(deliveries) if deliveries.isdigit() else 0,
        error=fields.get("error", ""),
        failed_at=_failed_at(fields.get("failed_at", "")),
    )


async def list_dead_letters(
    redis: aioredis.Redis, keys: Keys, groups: Iterable[str], limit: int
) -> list[DeadLetter]:
    """The newest ``limit`` dead letters of ``groups`` in every partition together, the
    latest failure first."""
    places = [(g, p) for g in groups for p in keys.numbers]
    # One round trip (one per node on a cluster): a stream per group and partition.
    pipe = redis.pipeline(transaction=False)
    for group, partition in places:
        pipe.xrevrange(keys.dead(group, partition), count=limit)
    found: list[tuple[tuple[datetime, tuple[int, int], str, int], DeadLetter]] = []
    for (group, partition), entries in zip(places, await pipe.execute(), strict=True):
        for entry_id, fields in entries:
            place = Place(group, partition, entry_id.decode())
            letter = _letter(keys, place, fields)
            # By failure time first: ids of different streams tie within a millisecond.
            order = (letter.failed_at or _NEVER, _id_key(place.entry), group, partition)
            found.append((order, letter))
    found.sort(key=lambda item: item[0], reverse=True)
    return [letter for _, letter in found[:limit]]


async def places_holding(
    redis: aioredis.Redis, keys: Keys, groups: Iterable[str], dead: DeadId
) -> list[Place]:
    """Where among ``groups`` (in its partition, or in any when none is named) the dead
    letter ``dead`` is."""
    partitions = keys.numbers if dead.partition is None else [dead.partition]
    places = [Place(g, p, dead.entry) for g in groups for p in partitions]
    pipe = redis.pipeline(transaction=False)
    for place in places:
        pipe.xrange(keys.dead(place.group, place.partition), dead.entry, dead.entry, count=1)
    found: list[Any] = await pipe.execute()
    return [place for place, entries in zip(places, found, strict=True) if entries]


def held_by(keys: Keys, places: Iterable[Place]) -> str:
    """The places an id matched, as an operator names them: ``mail p1-1700-0, ...``."""
    return ", ".join(f"{p.group} {p.public_id(keys)}" for p in places)


async def redrive_matching(
    redis: aioredis.Redis, keys: Keys, groups: Iterable[str], event_type: str | None
) -> int:
    """Send every dead letter of ``groups`` whose event type is ``event_type`` (None: any)
    back to its group, in every partition; how many went.

    Each group's dead letters in one partition move by one script per batch (every key
    of it in the partition's slot), the partitions at once.
    """
    moved = await asyncio.gather(
        *(
            Failures(redis, keys, group, partition).redrive_matching(event_type)
            for group in groups
            for partition in keys.numbers
        )
    )
    return sum(moved)
