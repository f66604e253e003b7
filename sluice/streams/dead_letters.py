"""Dead letters as an operator sees them: listed, found by id, for the CLI and the admin API.

Each group keeps its dead letters in its own stream (``Keys.dead``), so an
entry id is unique within a group only: two groups can hold the same id.
Moving entries back (redrive) and deleting them (drop) is ``Failures``' work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
import redis.asyncio as aioredis

from sluice.streams.keys import Keys

_ENTRY_ID = re.compile(r"(\d{1,20})-(\d{1,20})")
_U64 = 2**64
_NEVER = datetime.min.replace(tzinfo=UTC)


class DeadLetter(msgspec.Struct, kw_only=True, frozen=True):
    """One dead letter; ``stream`` is the aggregate stream the event came from."""

    id: str
    group: str
    stream: str
    event_id: str
    event_type: str
    deliveries: int
    error: str
    failed_at: datetime | None


def is_entry_id(text: str) -> bool:
    """Whether ``text`` is a full stream entry id (``ms-seq``) Redis would accept."""
    match = _ENTRY_ID.fullmatch(text)
    return match is not None and all(int(part) < _U64 for part in match.groups())


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _failed_at(raw: str) -> datetime | None:
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def _letter(group: str, entry_id: bytes, raw: Mapping[bytes, bytes]) -> DeadLetter:
    fields = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
    deliveries = fields.get("deliveries", "")
    return DeadLetter(
        id=entry_id.decode(),
        group=group,
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
    """The newest ``limit`` dead letters of ``groups`` together, the latest failure first."""
    letters: list[DeadLetter] = []
    for group in groups:
        entries: Any = await redis.xrevrange(keys.dead(group), count=limit)
        letters += [_letter(group, entry_id, fields) for entry_id, fields in entries]
    # By failure time first: ids of two groups' streams tie within a millisecond.
    letters.sort(key=lambda d: (d.failed_at or _NEVER, _id_key(d.id), d.group), reverse=True)
    return letters[:limit]


async def groups_holding(
    redis: aioredis.Redis, keys: Keys, groups: Iterable[str], dead_id: str
) -> list[str]:
    """The groups among ``groups`` whose dead letters hold the entry ``dead_id``."""
    return [g for g in groups if await redis.xrange(keys.dead(g), dead_id, dead_id, count=1)]
