"""Import jobs: the request (the job row, the uploaded file, ``ImportRequested``, one
transaction), each batch's checkpoint and the outcome.

An import is a row of ``jobs`` with kind ``import``, run and fenced like an export
(``sluice.builtin.links.exports.jobs``: ``begin_attempt`` bumps the attempt, ``cancel``, ``fail``,
``give_up`` and the purge apply as they are): ``snapshot_seq`` is the number of data
rows, ``cursor_seq`` the rows done, ``cursor_bytes`` the result's bytes stored in
``export_chunks`` (a JSON document, written as the rows are done), and ``code`` the
SHA-256 of the file, so uploading the same file again while its import is queued or
running answers that same job (the ``jobs_active`` index).

The uploaded file waits in ``import_uploads`` (the database, so a worker on any host
runs the job); it goes when the job succeeds, fails in its runner, is cancelled, or its
result is purged (a job given up in the dead letters keeps it, so a redrive resumes it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgspec

from sluice.app import Store, Tx, db_time, utcnow, uuid7
from sluice.builtin.links.events import ImportRequested
from sluice.builtin.links.exports import chunks
from sluice.builtin.links.exports.job_limits import check_room
from sluice.builtin.links.exports.jobs import Job, get_job, job_from_row

IMPORT = "import"
_JOB_COLUMNS = (
    "id, kind, owner_id, code, status, progress, created_at, started_at, finished_at, error,"
    " snapshot_seq, cursor_seq, cursor_bytes, rows, attempt, resumed_from, purged_at,"
    " trace_id, dead_lettered"
)


@dataclass(frozen=True)
class Upload:
    format: str
    data: bytes
    created: int  # rows with each outcome so far
    existing: int
    invalid: int


class Counts(msgspec.Struct, frozen=True):
    created: int = 0
    existing: int = 0
    invalid: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.created + other.created,
            self.existing + other.existing,
            self.invalid + other.invalid,
        )


async def request_import(
    store: Store,
    owner_id: str,
    data: bytes,
    fmt: str,
    rows: int,
    trace_id: str,
    *,
    per_user: int | None = None,
) -> tuple[Job, bool]:
    """The job importing ``data`` (``rows`` data rows of format ``fmt``), and whether it
    is new: while an import of the same bytes by the same user is queued or running,
    that job, with nothing written. ``TooManyJobs`` (nothing written) when the owner
    has ``per_user`` other imports queued or running (None: no limit)."""
    digest = hashlib.sha256(data).hexdigest()
    async with store.transaction() as tx:
        # One owner's requests one at a time: two uploads of one file find one job.
        await tx.serialize(f"imports-of:{owner_id}")
        active = await tx.fetchone(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE kind = ? AND owner_id = ? AND code = ?"
            " AND status IN ('queued', 'running')",
            (IMPORT, owner_id, digest),
        )
        if active is not None:
            return job_from_row(active), False
        if per_user is not None:
            await check_room(tx, IMPORT, owner_id, per_user)
        job_id, now = uuid7(), db_time(utcnow())
        await tx.execute(
            "INSERT INTO jobs (id, kind, owner_id, code, status, progress, created_at,"
            " snapshot_seq, trace_id) VALUES (?, ?, ?, ?, 'queued', 0, ?, ?, ?)",
            (job_id, IMPORT, owner_id, digest, now, rows, trace_id),
        )
        await tx.execute(
            "INSERT INTO import_uploads (job_id, format, data, created_at) VALUES (?, ?, ?, ?)",
            (job_id, fmt, data, now),
        )
        await tx.append(ImportRequested(job_id=job_id, owner_id=owner_id, trace_id=trace_id))
        row = await tx.fetchone(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    assert row is not None
    return job_from_row(row), True


async def get_upload(store: Store, job_id: str) -> Upload | None:
    row = await store.fetchone(
        "SELECT format, data, created, existing, invalid FROM import_uploads WHERE job_id = ?",
        (job_id,),
    )
    if row is None:
        return None
    return Upload(str(row[0]), bytes(row[1]), int(row[2]), int(row[3]), int(row[4]))


async def delete_upload(store: Store, job_id: str) -> None:
    async with store.transaction() as tx:
        await tx.execute("DELETE FROM import_uploads WHERE job_id = ?", (job_id,))


async def owns_batch(tx: Tx, job: Job, at_row: int) -> bool:
    """Lock the job until the batch commits; whether this attempt still runs it from
    ``at_row`` (a stale attempt or a cancelled job writes nothing)."""
    row = await tx.fetchone(
        "SELECT attempt, status, cursor_seq FROM jobs WHERE id = ?" + tx.dialect.row_lock("update"),
        (job.id,),
    )
    return row is not None and (int(row[0]), row[1], int(row[2])) == (
        job.attempt,
        "running",
        at_row,
    )


async def checkpoint(
    tx: Tx, job: Job, *, rows_done: int, at: int, data: bytes, counts: Counts
) -> None:
    """In the batch's transaction (after ``owns_batch``): its outcomes' bytes, the rows
    done, the progress and the outcome counts."""
    progress = min(99, rows_done * 100 // max(job.snapshot_seq, 1))
    await tx.execute(
        "UPDATE jobs SET cursor_seq = ?, cursor_bytes = ?, rows = ?,"
        " progress = CASE WHEN progress > ? THEN progress ELSE ? END WHERE id = ?",
        (rows_done, at + len(data), rows_done, progress, progress, job.id),
    )
    await chunks.append(tx, job.id, at, data)
    await tx.execute(
        "UPDATE import_uploads SET created = created + ?, existing = existing + ?,"
        " invalid = invalid + ? WHERE job_id = ?",
        (counts.created, counts.existing, counts.invalid, job.id),
    )


async def succeed(store: Store, job: Job, trailer: bytes) -> bool:
    """The result's last bytes, ``succeeded`` and the upload gone, together; False (nothing
    written) when the attempt no longer owns the job."""
    async with store.transaction() as tx:
        current = await get_job_in(tx, job.id)
        if current is None or (current.attempt, current.status) != (job.attempt, "running"):
            return False
        await chunks.append(tx, job.id, current.cursor_bytes, trailer)
        await tx.execute(
            "UPDATE jobs SET status = 'succeeded', progress = 100, finished_at = ?,"
            " cursor_bytes = ? WHERE id = ?",
            (db_time(utcnow()), current.cursor_bytes + len(trailer), job.id),
        )
        await tx.execute("DELETE FROM import_uploads WHERE job_id = ?", (job.id,))
    return True


async def get_job_in(tx: Tx, job_id: str) -> Job | None:
    row = await tx.fetchone(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?" + tx.dialect.row_lock("update"),
        (job_id,),
    )
    return None if row is None else job_from_row(row)


__all__ = ["IMPORT", "Counts", "Upload", "get_job", "get_upload", "request_import"]
