"""Job rows: the request, the runner's progress and checkpoints, the outcome, the purge.

A job is ``queued`` when requested, ``running`` from its first attempt, and
``succeeded`` or ``failed`` at the end, or ``cancelled`` by its owner or the admin
while queued or running (``cancel``: its stored bytes go in the same transaction,
and the status fences every later write of a runner still going). Each attempt
bumps ``attempt``; the runner's checkpoint and outcome updates name the attempt
they belong to, so a stale runner (one that lost its lock) can never move a job another runner owns.

A job whose stream entry went to the dead letters (every delivery's worker
died) is ``failed`` with ``dead_lettered`` set; a new delivery of its event (a
redrive) takes it up again from its checkpoint, unless another export of the
same link is active by then.

The CSV's bytes live in ``export_chunks`` (``sluice.builtin.links.exports.chunks``); every
write of them commits with the job update that counts them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec
import structlog

from sluice.app import Row, Store, Tx, db_time, from_db_time, optional_db_time, utcnow, uuid7
from sluice.app.advanced import HEAD_SQL
from sluice.builtin.links.events import ExportRequested
from sluice.builtin.links.exports import chunks
from sluice.builtin.links.exports.job_limits import check_room

log = structlog.get_logger(__name__)

EXPORT = "export"
Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED = ("succeeded", "failed", "cancelled")
ERROR_LIMIT = 2000


class NoSuchLink(Exception):
    """The link does not exist, or belongs to someone else (the same answer for both)."""


class NoSuchJob(Exception):
    """The job does not exist, or belongs to someone else (the same answer for both)."""


class AlreadyFinished(Exception):
    """The job succeeded, failed or was cancelled already: nothing left to cancel."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"the job is {job.status} already")
        self.job = job


class Job(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    kind: str
    owner_id: str
    code: str
    status: Status
    progress: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    snapshot_seq: int  # the history's head when the export was requested
    cursor_seq: int  # checkpoint: the last seq scanned ...
    cursor_bytes: int  # ... and the CSV bytes stored then (the result's size once succeeded)
    rows: int
    attempt: int
    resumed_from: int | None  # cursor_seq the latest attempt started from
    purged_at: datetime | None
    trace_id: str
    dead_lettered: bool = False

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def cancelled(self) -> bool:
        return self.status == "cancelled"

    @property
    def done(self) -> bool:
        """Finished for good: a delivery of its event has nothing to do."""
        return self.finished and not self.dead_lettered


_COLUMNS = (
    "id, kind, owner_id, code, status, progress, created_at, started_at, finished_at, error,"
    " snapshot_seq, cursor_seq, cursor_bytes, rows, attempt, resumed_from, purged_at,"
    " trace_id, dead_lettered"
)


def job_from_row(row: Row) -> Job:
    return Job(
        id=row[0],
        kind=row[1],
        owner_id=row[2],
        code=row[3],
        status=row[4],
        progress=int(row[5]),
        created_at=from_db_time(row[6]),
        started_at=optional_db_time(row[7]),
        finished_at=optional_db_time(row[8]),
        error=row[9],
        snapshot_seq=int(row[10]),
        cursor_seq=int(row[11]),
        cursor_bytes=int(row[12]),
        rows=int(row[13]),
        attempt=int(row[14]),
        resumed_from=row[15],
        purged_at=optional_db_time(row[16]),
        trace_id=row[17],
        dead_lettered=bool(row[18]),
    )


async def get_job(store: Store, job_id: str) -> Job | None:
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    return None if row is None else job_from_row(row)


async def request_export(
    store: Store, owner_id: str, code: str, trace_id: str, *, per_user: int | None = None
) -> tuple[Job, bool]:
    """The job exporting ``code``'s visits, and whether it is new.

    While an export of the link is queued or running, that job is returned and
    nothing is written: each export scans the whole history, so repeated clicks
    must not queue more scans. Otherwise a new job, with the history's head as
    its snapshot, and ``ExportRequested`` commit together. Raises ``NoSuchLink``,
    and ``TooManyExports`` (nothing written) when the owner has ``per_user``
    exports queued or running already (None: no limit).
    """
    async with store.transaction() as tx:
        # Locked: two requests for one link find the active job one after the other.
        link = await tx.fetchone(
            "SELECT owner_id FROM links WHERE code = ?" + tx.dialect.row_lock("update"), (code,)
        )
        if link is None or link[0] != owner_id:
            raise NoSuchLink(code)
        active = await tx.fetchone(
            f"SELECT {_COLUMNS} FROM jobs WHERE kind = ? AND owner_id = ? AND code = ?"
            " AND status IN ('queued', 'running')",
            (EXPORT, owner_id, code),
        )
        if active is not None:
            return job_from_row(active), False
        if per_user is not None:
            await check_room(tx, EXPORT, owner_id, per_user)
        # Held until commit: no event commits between this read and our append, so the
        # snapshot is exactly the history the user could see.
        await tx.lock_history()
        head = await tx.fetchone(HEAD_SQL)  # archived events count too
        now = utcnow()
        job = Job(
            id=uuid7(),
            kind=EXPORT,
            owner_id=owner_id,
            code=code,
            status="queued",
            progress=0,
            created_at=now,
            started_at=None,
            finished_at=None,
            error=None,
            snapshot_seq=int(head[0]) if head else 0,
            cursor_seq=0,
            cursor_bytes=0,
            rows=0,
            attempt=0,
            resumed_from=None,
            purged_at=None,
            trace_id=trace_id,
        )
        await tx.execute(
            "INSERT INTO jobs (id, kind, owner_id, code, status, progress, created_at,"
            " snapshot_seq, trace_id) VALUES (?, ?, ?, ?, 'queued', 0, ?, ?, ?)",
            (job.id, EXPORT, owner_id, code, db_time(now), job.snapshot_seq, trace_id),
        )
        await tx.append(
            ExportRequested(job_id=job.id, owner_id=owner_id, code=code, trace_id=trace_id)
        )
    return job, True


async def begin_attempt(store: Store, job_id: str, header: bytes) -> Job | None:
    """Mark the job running as a new attempt; the job as it is now (None if unknown).

    A finished job is returned unchanged: its event was delivered again. One
    given up in the dead letters runs again (a redrive), unless another export
    of the same link is queued or running.

    The stored CSV is lined up with the checkpoint in the same transaction:
    bytes past it go (none should be there: they commit with their checkpoint),
    and a job whose bytes before it are gone (purged while the job was failed)
    starts over, its progress holding until the scan passes it. A job at the
    start gets ``header`` as its first bytes.
    """
    async with store.transaction() as tx:
        row = await tx.fetchone(
            f"SELECT {_COLUMNS} FROM jobs WHERE id = ?" + tx.dialect.row_lock("update"), (job_id,)
        )
        if row is None:
            return None
        job = job_from_row(row)
        if job.done or (job.dead_lettered and await _superseded(tx, job)):
            return job
        cursor_seq, size, rows = job.cursor_seq, job.cursor_bytes, job.rows
        if not await chunks.cut_at(tx, job_id, size):
            log.warning("export: stored result incomplete, starting over", job_id=job_id)
            await chunks.delete(tx, job_id)
            cursor_seq, size, rows = 0, 0, 0
        if size == 0:
            await chunks.append(tx, job_id, 0, header)
            size = len(header)
        await tx.execute(
            "UPDATE jobs SET status = 'running', started_at = COALESCE(started_at, ?),"
            " attempt = attempt + 1, cursor_seq = ?, cursor_bytes = ?, rows = ?,"
            " resumed_from = ?, finished_at = NULL, error = NULL, dead_lettered = 0,"
            " purged_at = NULL WHERE id = ?",
            (db_time(utcnow()), cursor_seq, size, rows, cursor_seq, job_id),
        )
        row = await tx.fetchone(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    return None if row is None else job_from_row(row)


async def checkpoint(
    store: Store, job: Job, *, cursor_seq: int, rows: int, progress: int, at: int, data: bytes
) -> bool:
    """Store ``data`` (a window's CSV lines) at byte ``at``, the checkpoint after it and the
    progress (never lowered), in one transaction.

    False, with nothing stored, if the attempt is stale or the stored CSV does not end
    at ``at``.
    """
    async with store.transaction() as tx:
        changed = await tx.execute(
            "UPDATE jobs SET cursor_seq = ?, cursor_bytes = ?, rows = ?,"
            " progress = CASE WHEN progress > ? THEN progress ELSE ? END"
            " WHERE id = ? AND attempt = ? AND status = 'running' AND cursor_bytes = ?",
            (cursor_seq, at + len(data), rows, progress, progress, job.id, job.attempt, at),
        )
        if changed == 1:
            await chunks.append(tx, job.id, at, data)
    return changed == 1


async def succeed(store: Store, job: Job) -> bool:
    async with store.transaction() as tx:
        changed = await tx.execute(
            "UPDATE jobs SET status = 'succeeded', progress = 100, finished_at = ?"
            " WHERE id = ? AND attempt = ? AND status = 'running'",
            (db_time(utcnow()), job.id, job.attempt),
        )
    return changed == 1


async def _superseded(tx: Tx, job: Job) -> bool:
    row = await tx.fetchone(
        "SELECT 1 FROM jobs WHERE kind = ? AND owner_id = ? AND code = ? AND id != ?"
        " AND status IN ('queued', 'running')",
        (job.kind, job.owner_id, job.code, job.id),
    )
    return row is not None


async def cancel(store: Store, job_id: str, owner_id: str | None) -> Job:
    """Cancel a queued or running job (``owner_id``'s; None: any, for the admin): the job
    as it is now, ``cancelled``, its stored bytes gone, in one transaction.

    Raises ``NoSuchJob`` (unknown or not the owner's) and ``AlreadyFinished``. A runner
    still going cannot write after this commits: its checkpoint and outcome updates
    need ``running``; it stops on the cancel signal (``sluice.records.cancel``).
    """
    async with store.transaction() as tx:
        row = await tx.fetchone(
            f"SELECT {_COLUMNS} FROM jobs WHERE id = ?" + tx.dialect.row_lock("update"), (job_id,)
        )
        job = None if row is None else job_from_row(row)
        if job is None or (owner_id is not None and job.owner_id != owner_id):
            raise NoSuchJob(job_id)
        if job.finished:
            raise AlreadyFinished(job)
        await tx.execute(
            "UPDATE jobs SET status = 'cancelled', finished_at = ? WHERE id = ?",
            (db_time(utcnow()), job_id),
        )
        await chunks.delete(tx, job_id)
        await _delete_upload(tx, job_id)
        row = await tx.fetchone(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    assert row is not None  # locked above
    return job_from_row(row)


async def give_up(store: Store, job_id: str, error: str) -> bool:
    """Mark a queued or running job failed because its entry went to the dead letters."""
    return await _set_failed(store, job_id, error, attempt=None, dead_lettered=True)


async def fail(store: Store, job: Job, error: str) -> bool:
    """The runner's own failure: only while ``job.attempt`` is still the job's attempt."""
    return await _set_failed(store, job.id, error, attempt=job.attempt, dead_lettered=False)


async def _set_failed(
    store: Store, job_id: str, error: str, *, attempt: int | None, dead_lettered: bool
) -> bool:
    sql = (
        "UPDATE jobs SET status = 'failed', finished_at = ?, error = ?, dead_lettered = ?"
        " WHERE id = ? AND status IN ('queued', 'running')"
    )
    params: list[object] = [db_time(utcnow()), error[:ERROR_LIMIT], int(dead_lettered), job_id]
    if attempt is not None:
        sql += " AND attempt = ?"
        params.append(attempt)
    async with store.transaction() as tx:
        changed = await tx.execute(sql, params)
    return changed == 1


async def newest(store: Store, status: Status | None, limit: int) -> list[Job]:
    """Jobs newest first (ids are UUIDv7: their order is their creation order), of one
    status or of any, at most ``limit``. Queued and running ones are read from the
    ``jobs_active`` partial index (its own condition is repeated for the planner to
    use it), the others walk the primary key down: no page reads the whole table
    unless the status asked for is rare."""
    where = ""
    if status in ("queued", "running"):
        where = " WHERE status IN ('queued', 'running') AND status = ?"
    elif status is not None:
        where = " WHERE status = ?"
    params: list[object] = [] if status is None else [status]
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM jobs{where} ORDER BY id DESC LIMIT ?", [*params, limit]
    )
    return [job_from_row(row) for row in rows]


async def finished_before(store: Store, cutoff: datetime, limit: int) -> list[Job]:
    """Finished jobs whose results are not purged yet, oldest first."""
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM jobs WHERE finished_at IS NOT NULL AND purged_at IS NULL"
        " AND finished_at < ? ORDER BY finished_at, id LIMIT ?",
        (db_time(cutoff), limit),
    )
    return [job_from_row(row) for row in rows]


async def purge_result(store: Store, job_id: str, now: datetime) -> bool:
    """Delete a finished job's result and mark the job purged, together; False if it is
    not finished (a redrive took it up again) or already purged."""
    async with store.transaction() as tx:
        changed = await tx.execute(
            "UPDATE jobs SET purged_at = ? WHERE id = ? AND finished_at IS NOT NULL"
            " AND purged_at IS NULL",
            (db_time(now), job_id),
        )
        if changed == 1:
            await chunks.delete(tx, job_id)
            await _delete_upload(tx, job_id)
    return changed == 1


async def _delete_upload(tx: Tx, job_id: str) -> None:
    # An import's uploaded CSV (sluice.builtin.links.imports) goes with the job's end: cancelled, or
    # purged (a job given up in the dead letters kept it for a redrive until then).
    await tx.execute("DELETE FROM import_uploads WHERE job_id = ?", (job_id,))
