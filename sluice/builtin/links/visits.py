"""Visits: what a redirect learns about its visitor, and the writer that makes visits durable.

Bots and link previewers are recognised by the ``crawler-user-agents`` list
(the monitorbot/crawler-user-agents project, ~1,500 patterns, updated with each
release of the PyPI package); the browser family comes from ``ua-parser`` (the
uap-core regexes, shipped by ``ua-parser-builtins``). Both read the first
``PREFIX`` characters of the header, each pattern tried only where it can match
(``sluice.builtin.links.agent_patterns``), so an agent never seen costs a fraction
of a millisecond whatever it holds. User-Agents repeat, so both answers are cached
per User-Agent.

``VisitRecorder`` is a group commit: redirects append ``LinkVisited`` events to
an in-memory buffer and return at once; a background writer commits what is
buffered in one transaction when the oldest waiting visit is ``interval``
seconds old or ``batch`` visits wait. The events table is the outbox, so a
Redis outage loses nothing; a crash (``kill -9``) loses at most the visits of
the last few milliseconds. A failed commit keeps its events and is retried.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import re
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import structlog

from sluice.app import Store, Tx
from sluice.app.advanced import cancel_and_wait
from sluice.builtin.links.agent_patterns import PREFIX, browsers, crawlers
from sluice.builtin.links.events import LinkVisited

log = structlog.get_logger(__name__)

_HOST = re.compile(r"[a-z0-9_.-]{1,253}|[0-9a-f:.]{2,45}")


@functools.lru_cache(maxsize=4096)
def classify(user_agent: str) -> tuple[str, bool]:
    """(browser family, is a known crawler or link previewer) of a User-Agent, from its
    first ``PREFIX`` characters."""
    ua = user_agent[:PREFIX]
    is_bot = bool(ua) and crawlers().first(ua) is not None
    parsed = browsers().first(ua) if ua else None
    return (parsed.family if parsed is not None else "Other"), is_bot


def warm_up() -> None:
    """Compile both pattern sets now (~0.5 s), not on the first visit."""
    crawlers().first("warm-up")
    browsers().first("warm-up")


def referrer_host(referer: str | None) -> str | None:
    """The lowercased host of a Referer header; None when absent or not a URL with a host."""
    if not referer:
        return None
    try:
        host = urlsplit(referer.strip()).hostname
    except ValueError:
        return None
    if not host:
        return None
    host = host.rstrip(".")
    return host if _HOST.fullmatch(host) else None


class VisitRecorder:
    """Buffers visits and commits them in batches (group commit); see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        interval: float = 0.005,
        batch: int = 500,
        max_buffer: int = 100_000,
        max_per_commit: int = 5_000,
        max_backoff: float = 2.0,
        shutdown_timeout: float = 5.0,
    ) -> None:
        self._store = store
        self._interval = interval
        self._batch = batch
        self._max_buffer = max_buffer
        self._max_per_commit = max_per_commit  # bounds how long one commit holds the writer
        self._max_backoff = max_backoff
        self._shutdown_timeout = shutdown_timeout
        self._buffer: list[LinkVisited] = []
        # Event ids of buffered visits to links with max_visits: their commit also counts
        # them in link_visit_counts (sluice/builtin/links/limits.py).
        self._counted: set[str] = set()
        # With tracing on, the traceparent of the span each buffered visit was recorded
        # under (its redirect's), by event id: the commit appends each visit under its own.
        self._parents: dict[str, str] = {}
        self._oldest_at = 0.0  # loop time the oldest buffered visit arrived
        self._wake = asyncio.Event()  # a visit arrived, or closing
        self._full = asyncio.Event()  # a batch is waiting, or closing
        self._closing = False
        self._suspect = False  # a commit failed: its events may be stored already
        self._last_drop_log = 0.0
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        self.recorded = 0
        self.committed = 0
        self.dropped = 0

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def settled(self) -> bool:
        """Every visit recorded so far is committed (none buffered, no commit in flight)."""
        return self.committed == self.recorded

    def record(
        self, visit: LinkVisited, *, counted: bool = False, traceparent: str | None = None
    ) -> None:
        """Queue one visit; never blocks and never fails the request. ``counted``: the
        link has max_visits, so the commit also adds the visit to link_visit_counts.
        ``traceparent``: the span the visit is stored under (the redirect's, tracing on)."""
        if len(self._buffer) >= self._max_buffer:
            self._drop()
            return
        if counted:
            self._counted.add(visit.event_id)
        if traceparent is not None:
            self._parents[visit.event_id] = traceparent
        if not self._buffer:
            self._oldest_at = asyncio.get_running_loop().time()
            self._wake.set()
        self._buffer.append(visit)
        self.recorded += 1
        if len(self._buffer) >= self._batch:
            self._full.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="visit-writer")

    async def close(self) -> None:
        """Commit everything buffered, retrying for up to ``shutdown_timeout`` s, then stop."""
        self._closing = True
        self._wake.set()
        self._full.set()
        if self._task is None:
            return
        try:
            async with asyncio.timeout(self._shutdown_timeout):
                await asyncio.shield(self._task)
        except TimeoutError:
            await cancel_and_wait(self._task)
            log.error("visits lost at shutdown: the database did not commit", lost=self.buffered)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self._interval
        while True:
            if not self._buffer:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            wait = self._oldest_at + self._interval - loop.time()
            if wait > 0 and len(self._buffer) < self._batch and not self._closing:
                self._full.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._full.wait()
            if await self._commit():
                delay = self._interval
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 4, self._max_backoff)

    async def _commit(self) -> bool:
        pending = self._buffer[: self._max_per_commit]
        del self._buffer[: len(pending)]
        if self._buffer:
            self._oldest_at = 0.0  # the rest waited long enough: no wait before the next commit
        try:
            async with self._store.transaction() as tx:
                fresh = await self._not_stored(tx, pending) if self._suspect else pending
                if fresh:
                    await tx.append(*fresh, traceparents=self._traced(fresh))
                    if self._counted:
                        await self._count(tx, fresh)
        except Exception:
            # Keep them, oldest first, and retry; the request that made them got its 302.
            self._buffer[:0] = pending
            self._oldest_at = 0.0
            if not self._suspect:
                log.exception("visits not committed, will retry", buffered=self.buffered)
            self._suspect = True
            return False
        if self._suspect:
            log.info("visits committed again after failures", visits=len(pending))
            self._suspect = bool(self._buffer)
        self.commits += 1
        self.committed += len(pending)
        if self._counted:
            self._counted.difference_update(visit.event_id for visit in pending)
        if self._parents:
            for visit in pending:
                self._parents.pop(visit.event_id, None)
        return True

    def _traced(self, visits: Sequence[LinkVisited]) -> list[str | None] | None:
        """The span each of ``visits`` was recorded under; None when none was."""
        if not self._parents:
            return None
        return [self._parents.get(visit.event_id) for visit in visits]

    async def _count(self, tx: Tx, visits: Sequence[LinkVisited]) -> None:
        counts = collections.Counter(v.code for v in visits if v.event_id in self._counted)
        if counts:
            await tx.executemany(
                "INSERT INTO link_visit_counts (code, visits) VALUES (?, ?) ON CONFLICT (code)"
                " DO UPDATE SET visits = link_visit_counts.visits + excluded.visits",
                sorted(counts.items()),  # one order for every writer: no deadlock
            )

    @staticmethod
    async def _not_stored(tx: Tx, events: Sequence[LinkVisited]) -> list[LinkVisited]:
        """``events`` minus those already in the history (a failed commit may have landed)."""
        stored: set[str] = set()
        for i in range(0, len(events), 500):
            ids = [e.event_id for e in events[i : i + 500]]
            rows = await tx.fetchall(
                f"SELECT event_id FROM events WHERE event_id IN ({', '.join('?' * len(ids))})", ids
            )
            stored.update(str(row[0]) for row in rows)
        return [e for e in events if e.event_id not in stored]

    def _drop(self) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_drop_log >= 1.0:
            self._last_drop_log = now
            log.error("visit buffer full, visits dropped", dropped=self.dropped)
