"""Results are kept ``SLUICE_EXPORT_RETENTION`` seconds after their job finished.

The ``purge-exports`` task deletes older result files (and part files a failed
job left) and marks their jobs purged. The job rows stay, so ``GET
/v1/jobs/{id}`` keeps answering and its result answers 410 instead of 404.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

from sluice.events import utcnow
from sluice.exports import jobs
from sluice.exports.files import exports_dir, remove_results
from sluice.scheduler.tasks import TaskContext
from sluice.store import Store

PURGE_BATCH = 500


async def purge_finished(store: Store, directory: Path, now: datetime, retention_s: int) -> int:
    """Remove the results of jobs finished more than ``retention_s`` before ``now``.

    Files go first, then the mark, batch by batch: a crash in between leaves jobs
    unmarked whose files are gone, and the next run deletes nothing and marks them.
    """
    cutoff = now - timedelta(seconds=retention_s)
    purged = 0
    while batch := await jobs.finished_before(store, cutoff, PURGE_BATCH):
        await asyncio.to_thread(_remove_all, directory, [job.id for job in batch])
        purged += await jobs.mark_purged(store, [job.id for job in batch], now)
    return purged


def _remove_all(directory: Path, job_ids: list[str]) -> None:
    for job_id in job_ids:
        remove_results(directory, job_id)


async def purge_exports(ctx: TaskContext) -> None:
    """The ``purge-exports`` task. Needs no cursor: purged jobs leave its query."""
    config = ctx.resources.config
    purged = await purge_finished(
        ctx.resources.store, exports_dir(config), utcnow(), config.export_retention
    )
    ctx.log.info("export results purged", jobs=purged, retention_s=config.export_retention)
