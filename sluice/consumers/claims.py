"""Claims on entries, a helper the consumer (``sluice.consumers.consumer``) holds.

While a long batch runs, its entries' idle time is reset so no one reclaims them.
Entries idle past ``claim_idle_ms`` (their consumer died or hung) are claimed with
``XAUTOCLAIM`` one at a time, each charged a delivery; the consumer handles each alone
once its own pending list is drained. And what the pending list says of entries read:
whether their data is still there, how often Redis delivered them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog

from sluice.aio.outage import REDIS_DOWN
from sluice.streams.messages import EntryKey, Message, RawEntry
from sluice.streams.spec import RuntimeSettings
from sluice.telemetry import tracing

log = structlog.get_logger(__name__)


class Claims:
    """One consumer's claims: kept on the batch in hand, taken from dead consumers."""

    def __init__(
        self,
        redis: aioredis.Redis,
        group: str,
        name: str,
        settings: RuntimeSettings,
        streams: Sequence[str],
    ) -> None:
        self.redis = redis
        self.group = group
        self.name = name
        self.settings = settings
        # Where each stream's XAUTOCLAIM scan goes on from, round after round.
        self._cursors = dict.fromkeys(streams, "0-0")
        # With tracing on, the entry last claimed: the consumer that held it, its idle ms.
        self.owners: dict[EntryKey, tuple[str, int]] = {}

    def interval(self) -> float:
        """How often the consumer looks for entries to reclaim."""
        return min(max(self.settings.claim_idle_ms / 2000, 0.2), 30.0)

    async def keep(self, messages: Sequence[Message]) -> None:
        """Reset the entries' idle time while a long batch runs, so no one reclaims them."""
        by_stream: dict[str, list[str]] = {}
        for message in messages:
            by_stream.setdefault(message.stream, []).append(message.entry_id)
        while True:
            await asyncio.sleep(self.settings.claim_idle_ms / 3000)
            with contextlib.suppress(*REDIS_DOWN):
                for stream, ids in by_stream.items():
                    await self.redis.xclaim(
                        stream, self.group, self.name, 0, list[Any](ids), justid=True
                    )

    async def any_idle(self, stream: str) -> bool:
        """Whether an entry of ``stream`` is idle past ``claim_idle_ms`` (read without
        claiming: only then is the process's gate taken)."""
        idle: list[Any] = await self.redis.xpending_range(
            stream, self.group, min="-", max="+", count=1, idle=self.settings.claim_idle_ms
        )
        return bool(idle)

    async def claim_one(self, stream: str) -> tuple[list[RawEntry], bool]:
        """The entry claimed (if any), and whether the scan got back to the start.
        ``XAUTOCLAIM`` scans at most ten entries; the cursor carries the scan over."""
        if tracing.ENABLED:
            await self._owner(stream)
        reply = await self.redis.xautoclaim(
            stream,
            self.group,
            self.name,
            self.settings.claim_idle_ms,
            start_id=self._cursors[stream],
            count=1,
        )
        cursor, entries = reply[0], reply[1]
        deleted = reply[2] if len(reply) > 2 else []
        self._cursors[stream] = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        if deleted:
            log.warning("consumer: claimed entries were deleted", stream=stream, n=len(deleted))
        return list(entries), self._cursors[stream] == "0-0"

    async def _owner(self, stream: str) -> None:
        """The consumer holding the first entry the claim will take, read just before it
        (the claim does not say), kept in ``owners`` for the entry's span."""
        self.owners = {}
        rows: list[Any] = await self.redis.xpending_range(
            stream,
            self.group,
            min=self._cursors[stream],
            max="+",
            count=1,
            idle=self.settings.claim_idle_ms,
        )
        for row in rows:
            entry = (stream, row["message_id"].decode())
            self.owners[entry] = (row["consumer"].decode(), int(row["time_since_delivered"]))

    async def live_entries(
        self, stream: str, entries: Sequence[RawEntry]
    ) -> list[tuple[str, dict[bytes, bytes]]]:
        """The read entries whose data still exists; pending ids of trimmed entries are acked."""
        gone = [eid.decode() for eid, fields in entries if not fields]
        if gone:
            await self.redis.xack(stream, self.group, *gone)
            log.warning("consumer: pending entries were deleted", stream=stream, ids=gone)
        return [(eid.decode(), fields) for eid, fields in entries if fields]

    async def delivery_counts(
        self, stream: str, entries: Sequence[tuple[str, object]]
    ) -> dict[str, int]:
        """Redis's delivery counter of each entry (read from the pending list)."""
        if not entries:
            return {}
        rows: list[dict[str, Any]] = await self.redis.xpending_range(
            stream, self.group, min=entries[0][0], max=entries[-1][0], count=len(entries) * 4
        )
        return {row["message_id"].decode(): int(row["times_delivered"]) for row in rows}
