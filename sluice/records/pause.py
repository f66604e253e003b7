"""Pausing a handler group (docs/guides/operate.md): its consumers on every host stop taking
entries.

The database is the truth: a paused group is a row of ``paused_groups``
(migration 17), so a pause outlives every restart and every host sees it. Each
worker process runs one ``PauseWatch``, which reads that table (one small query)
every ``POLL_INTERVAL_S``; its consumers ask it before each read.

A pause takes effect within 2 s on every host: a watch sees it within a poll
(0.5 s), and a read already blocked in ``XREADGROUP`` when it comes returns
within ``READ_BLOCK_MS`` (1 s: a consumer caps its ``SLUICE_WORKER_BLOCK_MS``
there while a watch runs). No blocked read is interrupted: a read cancelled as
its reply arrives would leave the entries it took pending with no one to handle
them. Work in hand when the pause comes finishes, and is acked or retried as
ever; then the group takes nothing: no new entries, no retries (they wait in
its retry stream), no reclaims of dead consumers' entries, not even its own
pending entries after a restart. Resuming lets the consumers read again, and
the backlog drains.

Polling, not a Redis signal: a pause must hold across a Redis restart or
failover anyway, so the store must be read; one primary-key table read every
half second per process is nothing beside the consumers' own reads. A watch
that cannot read the store keeps what it knew last.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import structlog
from prometheus_client.core import Metric

from sluice.aio.waiting import first_of, wait_or_stop
from sluice.events import utcnow
from sluice.store import Store
from sluice.telemetry.prometheus import ScrapedGauge

log = structlog.get_logger(__name__)

POLL_INTERVAL_S = 0.5
# The longest blocking read of a consumer whose process watches for pauses.
READ_BLOCK_MS = 1_000


async def paused_groups(store: Store) -> dict[str, str]:
    """Every paused group, with the time it was paused (ISO 8601, UTC)."""
    rows = await store.fetchall("SELECT name, paused_at FROM paused_groups ORDER BY name")
    return {str(name): str(at) for name, at in rows}


async def pause(store: Store, group: str) -> None:
    """Pause ``group`` (already paused: it stays so, since the first pause)."""
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO paused_groups (name, paused_at) VALUES (?, ?)"
            " ON CONFLICT (name) DO NOTHING",
            (group, utcnow().isoformat()),
        )


async def resume(store: Store, group: str) -> None:
    """Let ``group`` take entries again (not paused: nothing changes)."""
    async with store.transaction() as tx:
        await tx.execute("DELETE FROM paused_groups WHERE name = ?", (group,))


PAUSED = ScrapedGauge("sluice_group_paused", "1 while the group is paused", ["group"])


def paused_gauge(groups: Iterable[str], paused: Iterable[str]) -> Metric:
    """``sluice_group_paused{group}``: 1 for each paused group of ``groups``, else 0."""
    stopped = set(paused)
    family = PAUSED.family()
    for group in sorted(groups):
        family.add_metric([group], 1 if group in stopped else 0)
    return family


class PauseWatch:
    """The paused groups as one worker process sees them, read from the store every
    ``interval_s`` by ``run``."""

    def __init__(self, store: Store, interval_s: float = POLL_INTERVAL_S) -> None:
        self._store = store
        self.interval_s = interval_s
        self._paused: frozenset[str] = frozenset()
        self._changed = asyncio.Event()
        self._failing = False

    def paused(self, group: str) -> bool:
        return group in self._paused

    async def refresh(self) -> None:
        """Read the paused groups now (raises if the store does not answer)."""
        now = frozenset(await paused_groups(self._store))
        if now == self._paused:
            return
        for group in sorted(now - self._paused):
            log.info("group paused: taking no entries", group=group)
        for group in sorted(self._paused - now):
            log.info("group resumed", group=group)
        self._paused = now
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def until_resumed(self, group: str, stop: asyncio.Event) -> None:
        """Return once ``group`` is not paused, or ``stop`` is set."""
        while self.paused(group) and not stop.is_set():
            await first_of(self._changed, stop)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; a failing read keeps the last answer (logged once)."""
        while not stop.is_set():
            await wait_or_stop(stop, self.interval_s)
            if stop.is_set():
                return
            try:
                await self.refresh()
            except Exception as exc:
                if not self._failing:
                    log.warning(
                        "pause watch: the store does not answer, keeping what it knew",
                        paused=sorted(self._paused),
                        error=repr(exc),
                    )
                self._failing = True
                continue
            if self._failing:
                log.info("pause watch: the store answers again")
            self._failing = False
