"""Results are kept ``SLUICE_EXPORT_RETENTION`` seconds after their job finished.

The ``purge-exports`` task deletes older results (and the bytes a failed job
left) and marks their jobs purged, one job per transaction, so a big result
does not hold the database's writers back for long. The job rows stay, so
``GET /v1/jobs/{id}`` keeps answering and its result answers 410 instead of 404.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sluice.app import Store, TaskContext, utcnow
from sluice.builtin.links.exports import jobs
from sluice.builtin.links.settings import LinksSettings

PURGE_BATCH = 500


async def purge_finished(store: Store, now: datetime, retention_s: int) -> int:
    """Remove the results of jobs finished more than ``retention_s`` before ``now``;
    how many jobs were purged."""
    cutoff = now - timedelta(seconds=retention_s)
    purged = 0
    while batch := await jobs.finished_before(store, cutoff, PURGE_BATCH):
        for job in batch:
            # False: a redrive took the job up since the query; it leaves the next one.
            purged += await jobs.purge_result(store, job.id, now)
    return purged


async def purge_exports(ctx: TaskContext) -> None:
    """The ``purge-exports`` task. Needs no cursor: purged jobs leave its query."""
    retention = LinksSettings.of(ctx).export_retention
    purged = await purge_finished(ctx.resources.store, utcnow(), retention)
    ctx.log.info("export results purged", jobs=purged, retention_s=retention)
