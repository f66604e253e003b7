"""Scheduling policies (docs/guides/tasks.md) with real ``sluice scheduler`` processes: overlap,
jitter, timeout, catch-up, pause and cancel, across replicas.

The tasks come from tests/integration/scheduler_tasks.py: ``overrun`` outlives its
period (TEST_OVERRUN_SECONDS), ``tick`` is instant. Policies are set the way an
operator sets them, by ``SLUICE_<TASK>_*`` in the processes' environment.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest

from sluice.app.assembly import create_app
from sluice.app.testing import Child, child_env, wait_for
from sluice.config import Config
from sluice.process.resources import Resources
from sluice.scheduler import runs
from sluice.scheduler.overlap import BUFFER_TAKEN, OVERRUN
from sluice.scheduler.pauses import PAUSED
from sluice.scheduler.policy import Policy, jitter
from sluice.scheduler.runner import CANCELLED
from tests.api.helpers import AiohttpClient

TOKEN = "policy-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
ENV = {
    "SLUICE_EXTRA_TASKS": "tests.integration.scheduler_tasks:tasks",
    "SLUICE_TASK_LOCK_TTL_MS": "1500",
}
pytestmark = pytest.mark.timeout(150)


async def records(resources: Resources, task: str) -> list[runs.RunRecord]:
    """Every record of ``task``, oldest first."""
    return list(reversed(await runs.newest(resources.store, task, 1000)))


def count(status: str, n: int, resources: Resources, task: str) -> Callable[[], object]:
    async def enough() -> bool:
        return sum(r.status == status for r in await records(resources, task)) >= n

    return enough


def once_each(found: list[runs.RunRecord]) -> None:
    """Each occurrence has one record (runs, skips) at most."""
    slots = Counter(r.scheduled_for for r in found if r.trigger != "manual")
    assert max(slots.values()) == 1, [s for s, n in slots.items() if n > 1]


def ran(found: list[runs.RunRecord]) -> list[runs.RunRecord]:
    return [r for r in found if r.status != "skipped"]


async def test_skip_records_the_occurrences_a_long_run_leaves_out(
    resources: Resources, spawn: Callable[..., Child]
) -> None:
    env = {**ENV, "TEST_OVERRUN_CRON": "*/2 * * * * *", "TEST_OVERRUN_SECONDS": "3"}
    for _ in range(3):
        spawn("scheduler", **env)
    await wait_for(count("skipped", 2, resources, "overrun"), timeout=60)
    await wait_for(count("succeeded", 2, resources, "overrun"), timeout=20)
    found = await records(resources, "overrun")
    once_each(found)
    # No catch-up window (the default, 0): the occurrences before the start stay missed.
    assert {r.trigger for r in found} == {"cron"}
    skipped = [r for r in found if r.status == "skipped"]
    assert {r.error for r in skipped} == {OVERRUN}
    done = [r for r in ran(found) if r.finished_at is not None]
    for earlier, later in itertools.pairwise(done):
        assert earlier.finished_at is not None and earlier.finished_at <= later.started_at
    # A run of 3 s every 2 s: every other occurrence runs, the ones between are skipped.
    ran_slots = {r.scheduled_for for r in done}
    assert all(s.scheduled_for - timedelta(seconds=2) in ran_slots for s in skipped[:-1])


@pytest.mark.stores("sqlite")  # run records on PostgreSQL: the skip, cancel, catch-up tests
async def test_buffer_one_runs_one_waiting_occurrence_right_after_the_run(
    resources: Resources, spawn: Callable[..., Child]
) -> None:
    env = {
        **ENV,
        "TEST_OVERRUN_CRON": "* * * * * *",
        "TEST_OVERRUN_SECONDS": "2.5",
        "SLUICE_OVERRUN_OVERLAP": "buffer_one",
    }
    for _ in range(3):
        spawn("scheduler", **env)
    await wait_for(count("succeeded", 3, resources, "overrun"), timeout=60)
    found = await records(resources, "overrun")
    once_each(found)
    done = [r for r in found if r.status == "succeeded"]
    for earlier, later in itertools.pairwise(done):
        assert earlier.finished_at is not None
        # The buffered occurrence starts as the run before it ends: no gap, no overlap.
        assert (
            earlier.finished_at <= later.started_at < earlier.finished_at + timedelta(seconds=0.6)
        ), (earlier, later)
        # It is the one right after the running one's: one waits, the further ones skip.
        assert later.scheduled_for > earlier.scheduled_for
    skipped = [r for r in found if r.status == "skipped"]
    assert BUFFER_TAKEN in {r.error for r in skipped}, skipped  # the further ones


async def test_cancel_other_cancels_the_running_run_on_any_host_and_starts_the_new_one(
    resources: Resources, spawn: Callable[..., Child]
) -> None:
    env = {
        **ENV,
        "TEST_OVERRUN_CRON": "*/2 * * * * *",
        "TEST_OVERRUN_SECONDS": "30",
        "SLUICE_OVERRUN_OVERLAP": "cancel_other",
    }
    for _ in range(3):
        spawn("scheduler", **env)
    await wait_for(count("cancelled", 3, resources, "overrun"), timeout=60)
    found = await records(resources, "overrun")
    once_each(found)
    cancelled = [r for r in found if r.status == "cancelled"]
    assert {r.error for r in cancelled} == {CANCELLED}
    by_slot = {r.scheduled_for: r for r in ran(found)}
    for run in cancelled[:-1]:  # the last one's successor may not be recorded yet
        newer = by_slot[run.scheduled_for + timedelta(seconds=2)]  # the one that replaced it
        assert run.finished_at is not None and run.finished_at <= newer.started_at
        assert newer.started_at - run.scheduled_for < timedelta(seconds=2 + 2)
    assert not [r for r in found if r.status == "succeeded"]


@pytest.mark.stores("sqlite")  # run records on PostgreSQL: the skip, cancel, catch-up tests
async def test_allow_all_overlaps_runs_and_still_runs_each_occurrence_once(
    resources: Resources, spawn: Callable[..., Child]
) -> None:
    env = {
        **ENV,
        "TEST_OVERRUN_CRON": "* * * * * *",
        "TEST_OVERRUN_SECONDS": "2.5",
        "SLUICE_OVERRUN_OVERLAP": "allow_all",
    }
    for _ in range(3):
        spawn("scheduler", **env)
    await wait_for(count("succeeded", 4, resources, "overrun"), timeout=60)
    found = await records(resources, "overrun")
    once_each(found)
    assert not [r for r in found if r.status in ("skipped", "failed")], found
    done = sorted((r for r in found if r.status == "succeeded"), key=lambda r: r.scheduled_for)
    assert any(b.started_at < a.finished_at for a, b in itertools.pairwise(done) if a.finished_at)
    slots = [r.scheduled_for for r in done]
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(slots)), slots
    effects = await resources.redis.lrange("test:effects:overrun", 0, -1)
    ends = Counter(e.split(b" ", 1)[0] for e in effects if b" end " in e)
    assert all(ends[r.id.encode()] == 1 for r in done)


@pytest.mark.stores("sqlite")  # run records on PostgreSQL: the skip, cancel, catch-up tests
async def test_jitter_is_the_same_on_every_replica_and_the_occurrence_runs_once(
    resources: Resources, spawn: Callable[..., Child]
) -> None:
    env = {**ENV, "TEST_TICK_CRON": "*/2 * * * * *", "SLUICE_TICK_JITTER_SECONDS": "1.5"}
    for _ in range(3):
        spawn("scheduler", **env)
    await wait_for(count("succeeded", 4, resources, "tick"), timeout=60)
    found = await records(resources, "tick")
    once_each(found)
    policy = Policy(jitter_seconds=1.5)
    delays = []
    for record in found:
        delay = jitter(policy, "tick", record.scheduled_for)
        delays.append(delay)
        started = record.started_at - record.scheduled_for
        assert delay <= started < delay + timedelta(seconds=0.5), (record, delay)
    assert len(set(delays)) > 1  # a delay per occurrence, not one for all


@pytest.mark.stores("sqlite")  # run records on PostgreSQL: the skip, cancel, catch-up tests
async def test_a_run_past_its_timeout_fails_with_deadline_and_gives_its_lock_back(
    resources: Resources, spawn: Callable[..., Child]
) -> None:
    env = {
        **ENV,
        "TEST_OVERRUN_CRON": "*/2 * * * * *",
        "TEST_OVERRUN_SECONDS": "30",
        "SLUICE_OVERRUN_TIMEOUT_SECONDS": "1",
    }
    for _ in range(2):
        spawn("scheduler", **env)
    await wait_for(count("failed", 3, resources, "overrun"), timeout=60)
    found = await records(resources, "overrun")
    once_each(found)
    failed = [r for r in found if r.status == "failed"]
    for run in failed:
        assert run.error is not None and run.error.startswith("deadline"), run
        assert run.finished_at is not None
        assert timedelta(seconds=1) <= run.finished_at - run.started_at < timedelta(seconds=2)
    # The lock went back each time: no occurrence after the first was skipped.
    assert not [r for r in found if r.status == "skipped"]
    slots = [r.scheduled_for for r in failed]
    assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(slots)), slots


async def test_missed_occurrences_inside_the_catchup_window_run_once_oldest_first(
    resources: Resources, spawn: Callable[..., Child]
) -> None:
    """No scheduler ran before the test: the occurrences of the window are missed ones."""
    started = time.time()
    env = {**ENV, "TEST_TICK_CRON": "*/2 * * * * *", "SLUICE_TICK_CATCHUP_SECONDS": "7"}
    for _ in range(2):
        spawn("scheduler", **env)

    async def caught_up() -> bool:
        return len([r for r in await records(resources, "tick") if r.trigger == "catchup"]) >= 3

    await wait_for(caught_up, timeout=40)
    await wait_for(count("succeeded", 5, resources, "tick"), timeout=20)
    found = await records(resources, "tick")
    once_each(found)
    catchup = [r for r in found if r.trigger == "catchup"]
    assert all(r.status == "succeeded" for r in catchup)
    slots = [r.scheduled_for for r in catchup]
    assert slots == sorted(slots)  # oldest first
    assert all(s.timestamp() >= started - 7 for s in slots)
    cron = [r.scheduled_for for r in found if r.trigger == "cron"]
    assert cron and max(slots) < min(cron)  # the window before the start, no later


@pytest.mark.stores("sqlite")  # run records on PostgreSQL: the skip, cancel, catch-up tests
async def test_pause_holds_across_processes_and_restarts_and_resume_lets_it_run(
    make_config: Callable[..., Config],
    resources: Resources,
    spawn: Callable[..., Child],
    aiohttp_client: AiohttpClient,
) -> None:
    config = make_config(admin_token=TOKEN, extra_tasks=ENV["SLUICE_EXTRA_TASKS"])
    api = await aiohttp_client(create_app(config))
    env = {**ENV, "TEST_TICK_CRON": "* * * * * *"}
    assert (await api.post("/v1/admin/tasks/tick/pause", headers=ADMIN)).status == 204
    first = spawn("scheduler", **env)
    spawn("scheduler", **env)

    async def paused_skips(n: int) -> bool:
        found = await records(resources, "tick")
        return sum(r.status == "skipped" and r.error == PAUSED for r in found) >= n

    await wait_for(lambda: paused_skips(2), timeout=30)
    assert first.terminate() == 0
    spawn("scheduler", **env)  # a restarted replica still sees the pause
    await wait_for(lambda: paused_skips(5), timeout=30)
    assert not [r for r in await records(resources, "tick") if r.status != "skipped"]
    listed = {t["name"]: t for t in await (await api.get("/v1/admin/tasks", headers=ADMIN)).json()}
    assert listed["tick"]["paused"] is True and listed["tick"]["paused_at"]
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "sluice", "tasks", "list"],
        env=child_env(config, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    rows = {line.split()[0]: line for line in cli.stdout.splitlines()}
    assert rows["tick"].endswith("PAUSED") and "overlap=skip" in rows["tick"], cli.stdout
    assert "PAUSED" not in rows["overrun"]

    assert (await api.post("/v1/admin/tasks/tick/resume", headers=ADMIN)).status == 204
    await wait_for(count("succeeded", 2, resources, "tick"), timeout=20)
    once_each(await records(resources, "tick"))


@pytest.mark.stores("sqlite")  # run records on PostgreSQL: the skip, cancel, catch-up tests
async def test_a_running_run_is_cancelled_on_its_host_within_two_seconds(
    make_config: Callable[..., Config],
    resources: Resources,
    spawn: Callable[..., Child],
    aiohttp_client: AiohttpClient,
) -> None:
    config = make_config(admin_token=TOKEN, extra_tasks=ENV["SLUICE_EXTRA_TASKS"])
    api = await aiohttp_client(create_app(config))
    env = {**ENV, "TEST_OVERRUN_CRON": "*/2 * * * * *", "TEST_OVERRUN_SECONDS": "30"}
    spawn("scheduler", **env)
    await wait_for(count("running", 1, resources, "overrun"), timeout=30)
    running = next(r for r in await records(resources, "overrun") if r.status == "running")
    path = f"/v1/admin/tasks/overrun/runs/{running.id}/cancel"
    asked = time.monotonic()
    response = await api.post(path, headers=ADMIN)
    assert response.status == 202, await response.text()

    async def cancelled() -> bool:
        record = await runs.get(resources.store, running.id)
        return record is not None and record.status == "cancelled"

    await wait_for(cancelled, timeout=10)
    assert time.monotonic() - asked < 2.0
    assert (await api.post(path, headers=ADMIN)).status == 409
    # Its lock went back: the next occurrence runs rather than being skipped.
    await wait_for(count("running", 1, resources, "overrun"), timeout=10)
