"""Claims on entries: a mixin of ``sluice.streams.consumer.Consumer``.

While a long batch runs, its entries' idle time is reset so no one reclaims them.
Entries idle past ``claim_idle_ms`` (their consumer died or hung) are reclaimed with
``XAUTOCLAIM`` and handled one at a time, each charged a delivery, once our own
pending list is drained.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
import structlog

from sluice.streams.messages import Message
from sluice.streams.outage import REDIS_DOWN
from sluice.streams.recovery import RecoveryGate
from sluice.streams.spec import Counters, RuntimeSettings

if TYPE_CHECKING:
    from sluice.streams.consumer import RawEntry

log = structlog.get_logger(__name__)


class Claiming:
    """``Consumer._keep_claimed`` and ``Consumer.reclaim``."""

    redis: aioredis.Redis
    group: str
    name: str
    settings: RuntimeSettings
    streams: list[str]
    gate: RecoveryGate
    counters: Counters
    _cursors: dict[str, str]
    _drained: bool

    if TYPE_CHECKING:  # the consumer's other parts (sluice.streams.consumer, .handling)

        def _paused(self) -> bool: ...

        async def _redelivered(self, stream: str, entries: Sequence[RawEntry]) -> list[Message]: ...

        async def process(self, messages: Sequence[Message]) -> None: ...

    async def _keep_claimed(self, messages: Sequence[Message]) -> None:
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

    # Reclaiming from dead consumers.

    async def reclaim(self) -> int:
        """Claim entries idle past ``claim_idle_ms`` from any consumer, and handle them.

        Their consumer died or hung holding them, perhaps because of one of them, so
        each is claimed (charged a delivery) and handled alone. Nothing is claimed
        before our own pending list is drained: its entries are handled alone too, and
        not claimed a second time while they wait their turn.
        """
        if not self._drained or self._paused():  # a paused group's entries wait
            return 0
        total = 0
        for stream in self.streams:
            total += await self._reclaim_stream(stream)
        return total

    async def _reclaim_stream(self, stream: str) -> int:
        """Up to ``batch`` entries, one per ``XAUTOCLAIM``, which scans at most ten;
        the cursor carries the scan over to the next round."""
        idle: list[Any] = await self.redis.xpending_range(
            stream, self.group, min="-", max="+", count=1, idle=self.settings.claim_idle_ms
        )
        if not idle:
            return 0  # nothing to claim: the process's gate is not taken
        async with self.gate.recovery():
            return await self._reclaim_alone(stream)

    async def _reclaim_alone(self, stream: str) -> int:
        claimed = 0
        for _ in range(self.settings.batch):
            batch, scanned_all = await self._claim_one(stream)
            for message in batch:  # logged first: if it kills us, the log names it
                log.info("consumer: reclaimed entry", group=self.group, stream=stream,
                         entry_id=message.entry_id, deliveries=message.deliveries)  # fmt: skip
            if batch:
                self.counters.claimed += len(batch)
                claimed += len(batch)
                await self.process(batch)
            if scanned_all:
                break
        return claimed

    async def _claim_one(self, stream: str) -> tuple[list[Message], bool]:
        """The entry claimed (if any), and whether the scan got back to the start."""
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
        batch = await self._redelivered(stream, entries) if entries else []
        return batch, self._cursors[stream] == "0-0"

    def _claim_interval(self) -> float:
        return min(max(self.settings.claim_idle_ms / 2000, 0.2), 30.0)
