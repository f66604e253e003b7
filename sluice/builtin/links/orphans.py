"""Orphan visits (docs/guides/links.md): GET requests for codes no link has, counted in process and
written in batches.

A 404 for an unknown code must stay as cheap as it is: counting it is a few dict
operations, and a background writer adds the tally to the database every
``interval`` seconds in one transaction (and on shutdown). A ``kill -9`` loses
at most the tally of the last interval; SIGTERM writes it.

A flood of random codes must not grow storage without bound, so every count is
capped at ``codes_per_day`` distinct codes per UTC day:

- in process, between two writes, a day holds at most that many codes; the
  visits of further codes count in the day's ``other``;
- in the database (``orphan_visit_codes``), a day holds at most that many rows.
  A write admits new codes, its busiest first, while the day has room, and
  adds the visits of the rest to the day's ``other`` (``orphan_visit_days``).
  Writers of every process take one lock (``serialize``), so the cap holds
  with many API processes too;
- days older than ``retention_days`` are deleted by the first write of each
  UTC day of each process: at most ``retention_days + 1`` days of
  ``codes_per_day + 1`` rows each are ever stored.

A day's ``visits`` is exact (every counted visit is in it). Its codes are exact
until the cap is reached; after that, a code first seen then counts in
``other`` however busy it becomes, so under a flood the top codes are
approximate.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import date, datetime, timedelta

import structlog

from sluice.app import Store, Tx, utcnow
from sluice.app.advanced import cancel_and_wait

log = structlog.get_logger(__name__)

_LOCK = "orphan-visits"  # the writers' serialize() name: the cap is checked under it
_IN_CHUNK = 500  # codes per IN (...) lookup


@dataclasses.dataclass
class DayTally:
    """One UTC day's orphan visits: all of them, per code (at most the cap), the rest."""

    visits: int = 0
    codes: dict[str, int] = dataclasses.field(default_factory=dict)
    other: int = 0

    def add(self, code: str, visits: int, cap: int) -> None:
        self.visits += visits
        self._place(code, visits, cap)

    def merge(self, older: DayTally, cap: int) -> None:
        """Add a tally whose write failed; its codes go first (they were seen first)."""
        newer, self.codes = self.codes, dict(older.codes)
        self.visits += older.visits
        self.other += older.other
        for code, visits in newer.items():
            self._place(code, visits, cap)

    def _place(self, code: str, visits: int, cap: int) -> None:
        """Count ``visits`` under ``code`` while the day has room for it, else in ``other``."""
        if code in self.codes:
            self.codes[code] += visits
        elif len(self.codes) < cap:
            self.codes[code] = visits
        else:
            self.other += visits


class OrphanTally:
    """Counts orphan visits per UTC day and writes them in batches; see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        codes_per_day: int = 1_000,
        retention_days: int = 90,
        interval: float = 1.0,
        max_backoff: float = 30.0,
    ) -> None:
        self._store = store
        self._cap = codes_per_day
        self._retention = retention_days
        self._interval = interval
        self._max_backoff = max_backoff
        self._days: dict[date, DayTally] = {}
        self._lock = asyncio.Lock()  # one write at a time: the loop's and a reader's
        self._purged_on: date | None = None
        self._failing = False
        self._task: asyncio.Task[None] | None = None
        self.counted = 0
        self.written = 0

    @property
    def pending(self) -> int:
        """Visits counted and not written yet."""
        return self.counted - self.written

    def count(self, code: str, now: datetime) -> None:
        """One GET for the unknown ``code`` at ``now`` (UTC); never blocks, never fails."""
        day = now.date()
        tally = self._days.get(day)
        if tally is None:
            tally = self._days[day] = DayTally()
        tally.add(code, 1, self._cap)
        self.counted += 1

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="orphan-writer")

    async def close(self) -> None:
        """Stop the loop and write what is counted (one attempt: the database may be down)."""
        if self._task is not None:
            async with self._lock:  # never in the middle of a write: cancelling loses nothing
                await cancel_and_wait(self._task)
        if not await self.flush() and self.pending:
            log.error("orphan visits lost at shutdown", lost=self.pending)

    async def flush(self) -> bool:
        """Write the tally; False when the database refused it (the tally is kept)."""
        async with self._lock:
            taken, self._days = self._days, {}
            if not taken:
                return True
            today = utcnow().date()
            purge = today != self._purged_on
            try:
                async with self._store.transaction() as tx:
                    await tx.serialize(_LOCK)
                    for day in sorted(taken):
                        await self._write_day(tx, day, taken[day])
                    if purge:
                        await self._purge(tx, today)
            except Exception:
                self._keep(taken)
                if not self._failing:
                    log.exception("orphan visits not written, will retry", pending=self.pending)
                self._failing = True
                return False
        if self._failing:
            log.info("orphan visits written again after failures")
            self._failing = False
        if purge:
            self._purged_on = today
        self.written += sum(tally.visits for tally in taken.values())
        return True

    async def _run(self) -> None:
        delay = self._interval
        while True:
            await asyncio.sleep(delay)
            ok = await self.flush()
            delay = self._interval if ok else min(delay * 2, self._max_backoff)

    def _keep(self, taken: dict[date, DayTally]) -> None:
        for day, older in taken.items():
            newer = self._days.get(day)
            if newer is None:
                self._days[day] = older
            else:
                newer.merge(older, self._cap)

    async def _write_day(self, tx: Tx, day: date, tally: DayTally) -> None:
        key = day.isoformat()
        # The day's row first: on PostgreSQL its lock also orders writers of this day.
        await tx.execute(
            "INSERT INTO orphan_visit_days (day, visits, other) VALUES (?, ?, 0)"
            " ON CONFLICT (day) DO UPDATE SET visits = orphan_visit_days.visits + excluded.visits",
            (key, tally.visits),
        )
        known = await _stored_codes(tx, key, sorted(tally.codes))
        row = await tx.fetchone("SELECT COUNT(*) FROM orphan_visit_codes WHERE day = ?", (key,))
        room = max(0, self._cap - (int(row[0]) if row else 0))
        new = sorted((c for c in tally.codes if c not in known), key=lambda c: (-tally.codes[c], c))
        admitted, spilled = new[:room], new[room:]
        rows = sorted([*known, *admitted])  # one order for every writer: no deadlock
        if rows:
            await tx.executemany(
                "INSERT INTO orphan_visit_codes (day, code, visits) VALUES (?, ?, ?)"
                " ON CONFLICT (day, code) DO UPDATE"
                " SET visits = orphan_visit_codes.visits + excluded.visits",
                [(key, code, tally.codes[code]) for code in rows],
            )
        other = tally.other + sum(tally.codes[code] for code in spilled)
        if other:
            await tx.execute(
                "UPDATE orphan_visit_days SET other = other + ? WHERE day = ?", (other, key)
            )

    async def _purge(self, tx: Tx, today: date) -> None:
        before = (today - timedelta(days=self._retention)).isoformat()
        codes = await tx.execute("DELETE FROM orphan_visit_codes WHERE day < ?", (before,))
        days = await tx.execute("DELETE FROM orphan_visit_days WHERE day < ?", (before,))
        if codes or days:
            log.info("old orphan visits purged", before=before, days=days, codes=codes)


async def _stored_codes(tx: Tx, day: str, codes: Sequence[str]) -> set[str]:
    """Which of ``codes`` the day has a row for already."""
    stored: set[str] = set()
    for i in range(0, len(codes), _IN_CHUNK):
        chunk = codes[i : i + _IN_CHUNK]
        rows = await tx.fetchall(
            "SELECT code FROM orphan_visit_codes WHERE day = ?"
            f" AND code IN ({', '.join('?' * len(chunk))})",
            (day, *chunk),
        )
        stored.update(str(row[0]) for row in rows)
    return stored
