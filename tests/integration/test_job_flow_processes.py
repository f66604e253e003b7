"""Priorities across real processes: a scheduler, a relay and a job worker that runs one
job at a time, behind a backlog of low-priority jobs (docs/concepts/job-flow.md)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from sluice.app.assembly import loaded_apps, open_resources
from sluice.app.testing import Child, wait_for
from sluice.config import Config
from sluice.events import utcnow
from tests.app_helpers import AppDir
from tests.integration.job_flow_helpers import FLOW

pytestmark = pytest.mark.slow

LOW, URGENT, BACKLOG = 60, 3, 5


async def test_urgent_jobs_overtake_a_backlog_of_low_ones_in_a_running_deployment(
    app_dir: AppDir, make_config: Callable[..., Config], sluice_spawn: Callable[..., Child]
) -> None:
    app_dir.module("flow_app", FLOW)
    config = make_config(apps="flow_app", job_group_backlog=BACKLOG)
    async with open_resources(config) as resources:
        store = resources.store
        report = loaded_apps(config).jobs["report"]
        async with store.transaction() as tx:
            for i in range(LOW):  # due now, in this order; 50 ms a run
                at = utcnow() + timedelta(milliseconds=i)
                note = report.payload(note=f"low {i}", pause=0.05)
                await report.schedule(tx, note, key=f"low-{i}", at=at)
        sluice_spawn(config, "relay")
        sluice_spawn(config, "worker", "flow-jobs", SLUICE_WORKER_CONCURRENCY="1")
        sluice_spawn(config, "scheduler")

        async def runs() -> list[str]:
            rows = await store.fetchall("SELECT note FROM job_runs ORDER BY seq")
            return [str(row[0]) for row in rows]

        async def started() -> bool:
            return len(await runs()) >= BACKLOG

        await wait_for(started, timeout=60)
        async with store.transaction() as tx:
            for i in range(URGENT):  # later than every low one, and more urgent
                note = report.payload(note=f"urgent {i}")
                await report.schedule(tx, note, key=f"urgent-{i}", at=utcnow(), priority=9)
        ran_before = len(await runs())
        assert ran_before < LOW - 2 * BACKLOG, "the low ones ran too fast to be overtaken"

        async def all_ran() -> bool:
            return len(await runs()) == LOW + URGENT

        await wait_for(all_ran, timeout=120)
        order = await runs()
        urgent = [order.index(f"urgent {i}") for i in range(URGENT)]
        # At most the backlog already fired runs before them, not the fifty-odd still due.
        assert max(urgent) < ran_before + BACKLOG + URGENT, (ran_before, urgent)
        assert order[-1].startswith("low")
