"""Run one import job: parse the uploaded file, apply its rows in batches from the job's
checkpoint, and finish.

Each batch is one transaction: the job row locked and checked (still this attempt's,
still running, at the row the batch starts from), every row's link and ``LinkCreated``,
the batch's lines of the result and the checkpoint. A worker killed at any point leaves
a checkpoint that counts exactly the rows whose links committed; the next attempt
(``begin_attempt`` bumps it, so an older runner writes nothing more) goes on from there,
so no row is applied twice. A cancelled job (``DELETE /v1/jobs/{id}``) fails the check
at its next batch, within a batch's time, and the runner raises ``Cancelled``.

The result is one JSON document, stored in ``export_chunks`` as the rows are done:
``{"format", "ignored_columns", "rows": [...], "created", "existing", "invalid"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
import redis.asyncio as aioredis
import structlog

from sluice.app import Cancelled, Resources, Store, utcnow
from sluice.app.advanced import REDIS_DOWN, Keys, forget_signal
from sluice.builtin.links.exports import jobs as job_rows
from sluice.builtin.links.exports.jobs import Job
from sluice.builtin.links.imports import jobs
from sluice.builtin.links.imports.formats import Draft, Parsed, UnreadableFile, parse
from sluice.builtin.links.imports.jobs import IMPORT, Counts
from sluice.builtin.links.imports.rows import RowContext, RowOutcome, apply
from sluice.builtin.links.keys import LinksKeys
from sluice.builtin.links.repository import room_for_links
from sluice.builtin.links.rules import short_origin
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.stored import Link

log = structlog.get_logger(__name__)

# Rows per transaction, at most; and the time a batch may hold the store's writes
# (SQLite's one writer lock) once it has a row done: it commits then with the rows done
# so far. 200 rows took 0.3 to 1.1 s on a busy `sluice up`, and every other write of
# the process waited behind each. A cancel is seen within one batch.
BATCH = 200
BATCH_SECONDS = 0.05
_ORIGIN = "imports"  # the origin of this group's cache hints (no API process has it)
_encoder = msgspec.json.Encoder()


class _Fenced(Exception):
    """The job was cancelled, or another attempt runs it now: stop writing."""


@dataclass(frozen=True)
class ImportDeps:
    store: Store
    redis: aioredis.Redis
    keys: Keys
    base_url: str
    max_attempts: int
    links_per_user: int
    routes: Mapping[str, str]  # the words no alias may take (Apps.reserved_words)

    @classmethod
    def from_resources(cls, resources: Resources) -> ImportDeps:
        config = resources.config
        return cls(
            store=resources.store,
            redis=resources.redis,
            keys=resources.keys,
            base_url=config.base_url,
            max_attempts=config.max_deliveries,
            links_per_user=LinksSettings.of(config).links_per_user,
            routes=resources.reserved_words,
        )


def stored_fields() -> frozenset[str]:
    """The optional link fields links can hold in this release: ``tags`` and ``title``
    are imported once the links table has them, and reported ignored until then."""
    return frozenset(field for field in ("tags", "title") if field in Link.__struct_fields__)


def header(parsed: Parsed) -> bytes:
    head = _encoder.encode({"format": parsed.format.name, "ignored_columns": parsed.ignored})
    return head[:-1] + b',"rows":['


def trailer(counts: Counts) -> bytes:
    return b"]," + _encoder.encode(counts)[1:]


async def run_import(job_id: str, deps: ImportDeps) -> None:
    """Run the job to its end, or raise for a retry; ``Cancelled`` when it is cancelled."""
    try:
        await _run(job_id, deps)
    except Cancelled:
        log.info("import cancelled", job_id=job_id)
        await jobs.delete_upload(deps.store, job_id)
        await forget_signal(deps.redis, deps.keys, IMPORT, job_id)
        raise


async def _run(job_id: str, deps: ImportDeps) -> None:
    job = await jobs.get_job(deps.store, job_id)
    if job is None or job.done:
        _raise_if_cancelled(job)
        return
    upload = await jobs.get_upload(deps.store, job_id)
    if upload is None:
        await job_rows.fail(deps.store, job, "the uploaded file is gone")
        return
    try:
        parsed = await asyncio.to_thread(parse, upload.data, stored=stored_fields())
    except UnreadableFile as exc:  # checked when uploaded: only a file from another release
        await job_rows.fail(deps.store, job, str(exc))
        await jobs.delete_upload(deps.store, job_id)
        return
    job = await job_rows.begin_attempt(deps.store, job_id, header(parsed))
    if job is None or job.finished:
        _raise_if_cancelled(job)
        return
    counts = Counts(upload.created, upload.existing, upload.invalid)
    try:
        await _apply_all(job, parsed, counts, deps)
    except _Fenced:
        _raise_if_cancelled(await jobs.get_job(deps.store, job_id))
        log.info("import: another attempt runs the job now", job_id=job_id)
    except Exception as exc:
        if job.attempt < deps.max_attempts:
            raise
        error = f"gave up after {job.attempt} attempts: {type(exc).__name__}: {exc}"
        if await job_rows.fail(deps.store, job, error):
            await jobs.delete_upload(deps.store, job_id)
        log.error("import failed for good", job_id=job_id, error=error)


def _raise_if_cancelled(job: Job | None) -> None:
    if job is not None and job.cancelled:
        raise Cancelled(f"import {job.id} was cancelled")


async def _apply_all(job: Job, parsed: Parsed, counts: Counts, deps: ImportDeps) -> None:
    ctx = RowContext(
        owner_id=job.owner_id,
        own=short_origin(deps.base_url),
        base_url=deps.base_url,
        now=utcnow(),
        foreign=parsed.format.foreign,
        routes=deps.routes,
    )
    done, size = job.cursor_seq, job.cursor_bytes
    drafts = parsed.drafts
    log.info(
        "import running",
        job_id=job.id,
        format=parsed.format.name,
        rows=job.snapshot_seq,
        from_row=done,
        attempt=job.attempt,
    )
    while batch := drafts[done : done + BATCH]:
        outcomes, lines = await _apply_batch(job, batch, ctx, done, size, deps)
        done, size = done + len(outcomes), size + len(lines)
        counts = counts + _counted(outcomes)
        await _hint([o.code for o in outcomes if o.outcome == "created" and o.code], deps)
    if not await jobs.succeed(deps.store, job, trailer(counts)):
        raise _Fenced(job.id)
    log.info(
        "import succeeded",
        job_id=job.id,
        created=counts.created,
        existing=counts.existing,
        invalid=counts.invalid,
    )


async def _apply_batch(
    job: Job, batch: list[Draft], ctx: RowContext, done: int, size: int, deps: ImportDeps
) -> tuple[list[RowOutcome], bytes]:
    """The outcomes of the batch's first rows, as many as fit in ``BATCH_SECONDS`` (one
    at least), and their bytes in the result, committed with the checkpoint."""
    async with deps.store.transaction() as tx:
        loop = asyncio.get_running_loop()
        until = loop.time() + BATCH_SECONDS
        # One owner's batches one at a time, so two imports of one URL make one link
        # (taken before the job's row lock, in the order request_import takes it).
        await tx.serialize(f"imports-of:{job.owner_id}")
        if not await jobs.owns_batch(tx, job, done):
            raise _Fenced(job.id)
        room = await room_for_links(tx, job.owner_id, deps.links_per_user)
        outcomes = []
        for draft in batch:
            outcomes.append(await apply(tx, draft, ctx, room))
            if loop.time() >= until:
                break
        lines = b",".join(_encoder.encode(outcome) for outcome in outcomes)
        if done > 0:
            lines = b"," + lines
        await jobs.checkpoint(
            tx,
            job,
            rows_done=done + len(outcomes),
            at=size,
            data=lines,
            counts=_counted(outcomes),
        )
    return outcomes, lines


def _counted(outcomes: list[RowOutcome]) -> Counts:
    tally = {"created": 0, "existing": 0, "invalid": 0}
    for outcome in outcomes:
        tally[outcome.outcome] += 1
    return Counts(**tally)


async def _hint(codes: list[str], deps: ImportDeps) -> None:
    """Tell the API replicas the new codes at once (one of them may have cached a code as
    unknown); best effort: the links stream brings every ``LinkCreated`` anyway."""
    if codes:
        with contextlib.suppress(*REDIS_DOWN):
            channel = LinksKeys(deps.keys.prefix).links_changed_channel()
            await deps.redis.publish(channel, " ".join([_ORIGIN, *codes]))
