"""Run one export job: under its lock, batch by batch, from its checkpoint.

The job scans the history from its checkpoint up to its snapshot in windows of
``export_batch`` sequence numbers. After each window one transaction stores
the link's visits as CSV bytes (``export_chunks``), the checkpoint (last seq
scanned, bytes stored) and the progress. A runner killed at any point leaves a
checkpoint that counts exactly the bytes stored; the next attempt scans on
from its seq, so no visit is written twice or skipped. Nothing is written to
the data dir: any process on any host can serve the result.

One runner at a time per job: a Redis lock (``<prefix>:export:<job id>:lock``,
TTL ``SLUICE_CLAIM_IDLE_MS``, renewed every third of it). A second delivery of
the same job (a relay duplicate, a redelivery after a crash) waits for the lock:
the job is then finished (nothing to do) or its runner died and the lock
expired (resume). Checkpoints name the attempt, so a runner that lost its lock
can no longer move the job.

A job cancelled by its owner or the admin (``jobs.cancel``) stops within a
second: the attempt runs under a ``CancelWatch`` (``sluice.records.cancel``)
that cancels it on the signal, and ``run_export`` raises ``Cancelled``, which
the consumer runtime acks without a retry. A delivery of a job cancelled
before it started raises it too, without running anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis
import structlog

from sluice.app import Cancelled, HandlerError, Resources, Store
from sluice.app.advanced import (
    REDIS_DOWN,
    CancelWatch,
    Keys,
    RedisLock,
    cancel_and_wait,
    forget_signal,
)
from sluice.builtin.links.exports import jobs, visits
from sluice.builtin.links.exports.jobs import EXPORT, Job
from sluice.builtin.links.keys import LinksKeys
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.stored import get_link

log = structlog.get_logger(__name__)


class LockLost(Exception):
    """The job's lock expired or another attempt took the job over; stop writing."""


class PermanentFailure(Exception):
    """The job cannot succeed however often it is tried (its link is gone)."""


@dataclass(frozen=True)
class ExportDeps:
    store: Store
    redis: aioredis.Redis
    keys: Keys
    batch: int  # sequence numbers per window
    lock_ttl_ms: int
    max_attempts: int

    @classmethod
    def from_resources(cls, resources: Resources) -> ExportDeps:
        config = resources.config
        return cls(
            store=resources.store,
            redis=resources.redis,
            keys=resources.keys,
            batch=LinksSettings.of(config).export_batch,
            lock_ttl_ms=config.claim_idle_ms,
            max_attempts=config.max_deliveries,
        )

    def lock(self, job_id: str) -> RedisLock:
        return RedisLock(
            self.redis, LinksKeys(self.keys.prefix).export_lock(job_id), self.lock_ttl_ms
        )

    def watch(self, job_id: str) -> CancelWatch:
        async def recorded() -> bool:
            job = await jobs.get_job(self.store, job_id)
            return job is not None and job.cancelled

        return CancelWatch(self.redis, self.keys, EXPORT, job_id, recorded)


def progress_at(cursor: int, snapshot: int) -> int:
    """0-99 while scanning; 100 is set only with ``succeeded``."""
    if snapshot <= 0:
        return 99
    return min(99, cursor * 100 // snapshot)


async def run_export(job_id: str, deps: ExportDeps) -> None:
    """Run the job to its end, or raise for a retry (the runtime's backoff applies);
    ``Cancelled`` when the job is cancelled, before or while it runs."""
    try:
        await _run(job_id, deps)
    except Cancelled:
        log.info("export cancelled", job_id=job_id)
        await forget_signal(deps.redis, deps.keys, EXPORT, job_id)
        raise


async def _run(job_id: str, deps: ExportDeps) -> None:
    job = await jobs.get_job(deps.store, job_id)
    if job is None:
        log.warning("export: no such job, nothing to do", job_id=job_id)
        return
    if job.done:
        _raise_if_cancelled(job)
        return
    lock = deps.lock(job_id)
    if not await _acquire(lock, deps, job_id):
        _raise_if_cancelled(await jobs.get_job(deps.store, job_id))
        return
    try:
        async with _renewing(lock) as lost:
            await deps.watch(job_id).run(_attempt(job_id, deps, lost))
    finally:
        with contextlib.suppress(*REDIS_DOWN):
            await lock.release()


def _raise_if_cancelled(job: Job | None) -> None:
    if job is not None and job.cancelled:
        raise Cancelled(f"export {job.id} was cancelled")


async def _fenced(deps: ExportDeps, job: Job) -> Exception:
    """Why a write of the attempt changed nothing: the job was cancelled, or another
    attempt owns it."""
    now = await jobs.get_job(deps.store, job.id)
    if now is not None and now.cancelled:
        return Cancelled(f"export {job.id} was cancelled")
    return LockLost(job.id)


async def _acquire(lock: RedisLock, deps: ExportDeps, job_id: str) -> bool:
    """Take the job's lock; False when the job finished while we waited for it.

    The lock of a runner that died expires within its TTL; one renewed for longer
    belongs to a live runner, and this delivery is retried later instead.
    """
    deadline = time.monotonic() + 2 * deps.lock_ttl_ms / 1000 + 1
    pause = min(max(deps.lock_ttl_ms / 10_000, 0.05), 1.0)
    while not await lock.acquire():
        job = await jobs.get_job(deps.store, job_id)
        if job is None or job.done:
            return False
        if time.monotonic() > deadline:
            raise HandlerError(f"export {job_id} is being run by another worker")
        await asyncio.sleep(pause)
    return True


@contextlib.asynccontextmanager
async def _renewing(lock: RedisLock) -> AsyncIterator[asyncio.Event]:
    """Renew the lock every third of its TTL; the event is set once it is lost."""
    lost = asyncio.Event()

    async def renew() -> None:
        interval = lock.ttl_ms / 3000
        valid_until = time.monotonic() + lock.ttl_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                if await lock.renew():
                    valid_until = time.monotonic() + lock.ttl_ms / 1000
                    continue
                lost.set()
            except Exception as exc:  # unknown: the lock may still be ours until it expires
                log.warning("export: lock renewal failed", lock=lock.key, error=repr(exc))
                if time.monotonic() + interval >= valid_until:
                    lost.set()
            if lost.is_set():
                log.error("export: lock lost", lock=lock.key)
                return

    watchdog = asyncio.create_task(renew())
    try:
        yield lost
    finally:
        await cancel_and_wait(watchdog)


async def _attempt(job_id: str, deps: ExportDeps, lost: asyncio.Event) -> None:
    job = await jobs.begin_attempt(deps.store, job_id, visits.header())
    if job is None or job.finished:
        _raise_if_cancelled(job)
        return
    try:
        await _export(job, deps, lost)
    except Cancelled:
        raise
    except PermanentFailure as exc:
        await jobs.fail(deps.store, job, str(exc))
        log.warning("export failed", job_id=job.id, error=str(exc))
    except LockLost:
        raise HandlerError(f"export {job.id}: lost its lock, another attempt resumes it") from None
    except Exception as exc:
        if job.attempt < deps.max_attempts:
            raise
        error = f"{type(exc).__name__}: {exc}"
        await jobs.fail(deps.store, job, f"gave up after {job.attempt} attempts: {error}")
        log.error("export failed for good", job_id=job.id, attempts=job.attempt, error=error)


async def _export(job: Job, deps: ExportDeps, lost: asyncio.Event) -> None:
    link = await get_link(deps.store, job.code)
    if link is None or link.owner_id != job.owner_id:
        raise PermanentFailure(f"the link {job.code!r} does not exist")
    log.info(
        "export running",
        job_id=job.id,
        code=job.code,
        attempt=job.attempt,
        from_seq=job.cursor_seq,
        snapshot_seq=job.snapshot_seq,
    )
    started = time.monotonic()
    cursor, size, rows = job.cursor_seq, job.cursor_bytes, job.rows
    while cursor < job.snapshot_seq:
        upto = await visits.window_end(deps.store, cursor, deps.batch, job.snapshot_seq)
        found = await visits.scan(deps.store, job.code, cursor, upto)
        data = visits.csv_rows(found)
        _check(lost, job)
        saved = await jobs.checkpoint(
            deps.store,
            job,
            cursor_seq=upto,
            rows=rows + len(found),
            progress=progress_at(upto, job.snapshot_seq),
            at=size,
            data=data,
        )
        if not saved:
            raise await _fenced(deps, job)
        cursor, size, rows = upto, size + len(data), rows + len(found)
    _check(lost, job)
    if not await jobs.succeed(deps.store, job):
        raise await _fenced(deps, job)
    log.info(
        "export succeeded",
        job_id=job.id,
        rows=rows,
        bytes=size,
        events_scanned=job.snapshot_seq - job.cursor_seq,
        seconds=round(time.monotonic() - started, 3),
    )


def _check(lost: asyncio.Event, job: Job) -> None:
    if lost.is_set():
        raise LockLost(job.id)
