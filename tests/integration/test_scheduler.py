"""The scheduler in process: run records, locks, skips, checkpoints, once per occurrence."""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from sluice.app.assembly import all_tasks, default_apps, open_resources
from sluice.app.testing import wait_for
from sluice.builtin.links.pool import free_codes
from sluice.config import Config
from sluice.events import TaskRunFinished, decode
from sluice.process.resources import Resources
from sluice.scheduler import runs
from sluice.scheduler.builtin import PURGE_BATCH, purge_expired
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.loop import Scheduler
from sluice.scheduler.runner import LOST_LOCK, AlreadyRan, Busy, Runner
from sluice.scheduler.task_spec import Task, TaskContext
from sluice.store.users import db_time
from tests.integration.helpers import Running

pytestmark = pytest.mark.topologies("single", "cluster")

EVERY_SECOND = parse_cron("* * * * * *", "UTC")


def counted(name: str, task: str) -> float:
    """A scheduler metric of this process (prometheus-client's default registry)."""
    return REGISTRY.get_sample_value(f"sluice_{name}_total", {"task": task}) or 0.0


@pytest.fixture
async def fast_locks(make_config: Callable[..., Config]) -> AsyncIterator[Resources]:
    """Resources whose task locks live 600 ms (renewed every 200 ms)."""
    async with open_resources(make_config(task_lock_ttl_ms=600)) as res:
        yield res


async def records(resources: Resources, task: str) -> list[runs.RunRecord]:
    return list(reversed(await runs.newest(resources.store, task, 1000)))


async def finished_events(resources: Resources, task: str) -> list[TaskRunFinished]:
    found = []
    for stored in await resources.store.events_after(0, 10_000, types=["TaskRunFinished"]):
        event = decode(stored.payload)
        assert isinstance(event, TaskRunFinished)
        if event.task == task:
            found.append(event)
    return found


async def test_a_failing_task_is_recorded_and_the_loop_keeps_running(
    resources: Resources, running: Running
) -> None:
    async def boom(ctx: TaskContext) -> None:
        raise RuntimeError("the disk is full")

    async def fine(ctx: TaskContext) -> None:
        return None

    scheduler = Scheduler(
        resources, [Task("boom", EVERY_SECOND, boom), Task("fine", EVERY_SECOND, fine)]
    )
    running.start(scheduler.run(running.stop))

    async def two_of_each() -> bool:
        failed = [r for r in await records(resources, "boom") if r.status == "failed"]
        ok = [r for r in await records(resources, "fine") if r.status == "succeeded"]
        return len(failed) >= 2 and len(ok) >= 2

    await wait_for(two_of_each, timeout=10)
    failed = (await records(resources, "boom"))[0]
    assert failed.error is not None and "RuntimeError: the disk is full" in failed.error
    assert failed.trigger == "cron" and len(failed.trace_id) == 32
    assert failed.finished_at is not None and failed.started_at >= failed.scheduled_for
    events = await finished_events(resources, "boom")
    assert events[0].run_id == failed.id and events[0].status == "failed"
    assert events[0].trace_id == failed.trace_id


async def test_racing_replicas_run_an_occurrence_once_even_after_losing_the_claims(
    resources: Resources, config: Config
) -> None:
    ran: list[str] = []

    async def work(ctx: TaskContext) -> None:
        ran.append(ctx.run.id)

    task = Task("once", EVERY_SECOND, work)
    slot = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    async with open_resources(config) as second, open_resources(config) as third:
        replicas = [Scheduler(r, [task]) for r in (resources, second, third)]
        await asyncio.gather(*(s.occurrence(task, slot) for s in replicas for _ in range(3)))
        assert len(ran) == 1
        # Redis lost the claims (a restart without the AOF tail): the run record decides.
        await resources.redis.delete(
            *[k async for k in resources.redis.scan_iter(match="sluice:task:once:slot:*")]
        )
        await asyncio.gather(*(s.occurrence(task, slot) for s in replicas))
        with pytest.raises(AlreadyRan):
            await replicas[0].runner.begin(task, "cron", slot)
    assert len(ran) == 1
    assert [r.status for r in await records(resources, "once")] == ["succeeded"]


async def test_a_long_run_keeps_its_lock_through_renewal(fast_locks: Resources) -> None:
    async def long(ctx: TaskContext) -> None:
        await asyncio.sleep(3.0)  # five lock TTLs

    task = Task("long", EVERY_SECOND, long)
    runner, other = Runner(fast_locks, holder="a"), Runner(fast_locks, holder="b")
    run = await runner.begin(task, "manual", datetime.now(UTC))
    started = time.monotonic()
    execution = asyncio.create_task(runner.execute(run))
    last_refused = 0.0
    # Asked until half a second before the run ends, not up to its end: a begin that
    # starts as the run releases its lock would rightly get the lock.
    while time.monotonic() - started < 2.5:
        assert not execution.done()
        with pytest.raises(Busy):
            await other.begin(task, "manual", datetime.now(UTC))
        last_refused = time.monotonic() - started
        await asyncio.sleep(0.1)
    record = await execution
    assert record.status == "succeeded"
    assert last_refused > 3 * fast_locks.config.task_lock_ttl_ms / 1000  # renewed, not kept
    assert await fast_locks.redis.exists(fast_locks.keys.task_lock("long")) == 0


async def test_the_lock_is_held_until_the_outcome_is_recorded(
    fast_locks: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next holder marks records still "running" as abandoned and resumes from
    # them: it must not get the lock while the last run's outcome is being written.
    recording, proceed = asyncio.Event(), asyncio.Event()
    finish = runs.finish

    async def slow_finish(*args: Any, **kwargs: Any) -> None:
        recording.set()
        await proceed.wait()
        await finish(*args, **kwargs)

    async def checkpointed(ctx: TaskContext) -> None:
        await ctx.checkpoint("done")

    monkeypatch.setattr(runs, "finish", slow_finish)
    task = Task("quick", EVERY_SECOND, checkpointed)
    runner, other = Runner(fast_locks, holder="a"), Runner(fast_locks, holder="b")
    execution = asyncio.create_task(
        runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))
    )
    await recording.wait()
    with pytest.raises(Busy):
        await other.begin(task, "manual", datetime.now(UTC))
    # A slow write (the database busy) outlasts the lock's TTL: it is still renewed.
    await asyncio.sleep(2 * fast_locks.config.task_lock_ttl_ms / 1000)
    with pytest.raises(Busy):
        await other.begin(task, "manual", datetime.now(UTC))
    proceed.set()
    assert (await execution).status == "succeeded"
    second = await other.begin(task, "manual", datetime.now(UTC))
    assert second.context.cursor is None  # the run succeeded: nothing to resume
    await other.execute(second)
    assert [r.status for r in await records(fast_locks, "quick")] == ["succeeded", "succeeded"]


async def test_a_run_whose_lock_is_taken_over_stops_and_is_recorded_failed(
    fast_locks: Resources,
) -> None:
    steps: list[int] = []

    async def endless(ctx: TaskContext) -> None:
        while True:
            steps.append(len(steps))
            await asyncio.sleep(0.02)

    task = Task("endless", EVERY_SECOND, endless)
    runner = Runner(fast_locks, holder="a")
    losses = counted("task_lock_losses", "endless")
    run = await runner.begin(task, "manual", datetime.now(UTC))
    execution = asyncio.create_task(runner.execute(run))
    await wait_for(lambda: _true(len(steps) > 5))
    # Someone else holds the lock now (it expired during a pause, say).
    await fast_locks.redis.set(fast_locks.keys.task_lock("endless"), "another-token")
    record = await asyncio.wait_for(execution, 5)
    assert record.status == "failed" and record.error == LOST_LOCK
    assert counted("task_lock_losses", "endless") == losses + 1
    stopped_at = len(steps)
    await asyncio.sleep(0.1)
    assert len(steps) == stopped_at, "the task kept running after losing its lock"
    stored = await runs.get(fast_locks.store, record.id)
    assert stored is not None and stored.status == "failed" and stored.error == LOST_LOCK
    # The other holder's lock is left alone.
    assert await fast_locks.redis.get(fast_locks.keys.task_lock("endless")) == b"another-token"


async def test_a_release_that_finds_the_lock_gone_is_counted(resources: Resources) -> None:
    async def drop_own_lock(ctx: TaskContext) -> None:
        await ctx.resources.redis.delete(ctx.resources.keys.task_lock("vanishing"))

    runner = Runner(resources, holder="a")
    gone = counted("task_lock_releases_gone", "vanishing")
    run = await runner.begin(
        Task("vanishing", EVERY_SECOND, drop_own_lock), "manual", datetime.now(UTC)
    )
    record = await runner.execute(run)
    assert record.status == "succeeded"
    assert counted("task_lock_releases_gone", "vanishing") == gone + 1


async def test_an_occurrence_during_a_run_is_skipped_not_queued(
    resources: Resources, running: Running
) -> None:
    async def slow(ctx: TaskContext) -> None:
        await asyncio.sleep(1.5)

    skipped = counted("task_occurrences_skipped", "slow")
    scheduler = Scheduler(resources, [Task("slow", EVERY_SECOND, slow)])
    running.start(scheduler.run(running.stop))

    async def three_done() -> bool:
        return sum(r.status == "succeeded" for r in await records(resources, "slow")) >= 3

    await wait_for(three_done, timeout=15)
    done = [r for r in await records(resources, "slow") if r.status == "succeeded"]
    for earlier, later in itertools.pairwise(done):
        assert earlier.finished_at is not None and earlier.finished_at <= later.started_at
        assert later.scheduled_for - earlier.scheduled_for >= timedelta(seconds=2)
    assert counted("task_occurrences_skipped", "slow") >= skipped + 2


async def test_a_batch_task_that_failed_midway_resumes_from_its_cursor(
    resources: Resources,
) -> None:
    processed: list[int] = []
    fail_after = [4]

    async def batches(ctx: TaskContext) -> None:
        start = int(ctx.cursor) + 1 if ctx.cursor is not None else 0
        for batch in range(start, 10):
            processed.append(batch)
            await ctx.checkpoint(str(batch))
            if fail_after and batch == fail_after[0]:
                fail_after.clear()
                raise ConnectionError("upstream went away")

    task = Task("batches", EVERY_SECOND, batches)
    runner = Runner(resources, holder="a")
    first = await runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))
    second = await runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))
    assert first.status == "failed" and first.cursor == "4"
    assert second.status == "succeeded" and second.cursor == "9"
    assert processed == list(range(10))
    # A later, fresh run starts over: the previous run finished.
    third = await runner.begin(task, "manual", datetime.now(UTC))
    assert third.context.cursor is None
    await runner.execute(third)


async def _true(value: bool) -> bool:
    return value


def test_run_records_serialize_with_rfc3339_times() -> None:
    moment = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    record = runs.RunRecord(
        id="r",
        task="t",
        trigger="cron",
        status="running",
        scheduled_for=moment,
        started_at=moment,
        trace_id="x",
    )
    data = msgspec.json.decode(msgspec.json.encode(record))
    assert data["scheduled_for"] == "2026-03-29T01:00:00Z" and data["finished_at"] is None


async def test_purge_expired_removes_expired_tokens_and_old_occurrences_only(
    resources: Resources,
) -> None:
    now = datetime.now(UTC)
    async with resources.store.transaction() as tx:
        await tx.execute(
            "INSERT INTO users (id, email, email_key, password_hash, created_at)"
            " VALUES ('u', 'a@b.c', 'a@b.c', 'x', ?)",
            (db_time(now),),
        )
        await tx.executemany(
            "INSERT INTO tokens (token_hash, user_id, created_at, expires_at)"
            " VALUES (?, 'u', ?, ?)",
            [
                (f"old{i:05d}", db_time(now), db_time(now - timedelta(seconds=1)))
                for i in range(PURGE_BATCH + 5)
            ]
            + [("fresh", db_time(now), db_time(now + timedelta(days=1)))],
        )
        await tx.executemany(
            "INSERT INTO reminder_occurrences (reminder_id, scheduled_for, event_id, fired_at)"
            " VALUES ('r', ?, 'e', ?)",
            [(db_time(now - timedelta(days=d)), db_time(now)) for d in (1, 6, 8, 30)],
        )
    purges = default_apps().purges  # the reminders app's, as the assembly hands them over
    task = Task("purge-expired", EVERY_SECOND, functools.partial(purge_expired, purges=purges))
    runner = Runner(resources, holder="a")
    record = await runner.execute(await runner.begin(task, "manual", now))
    assert record.status == "succeeded" and record.cursor == "occurrences"
    tokens = await resources.store.fetchall("SELECT token_hash FROM tokens")
    assert tokens == [("fresh",)]
    kept = await resources.store.fetchall("SELECT scheduled_for FROM reminder_occurrences")
    assert sorted(r[0] for r in kept) == sorted(db_time(now - timedelta(days=d)) for d in (1, 6))


async def test_the_refill_task_tops_the_code_pool_up_to_its_target(
    make_config: Callable[..., Config],
) -> None:
    async with open_resources(make_config(code_pool_target=2_500)) as resources:
        task = all_tasks(resources.config)["refill-code-pool"]
        runner = Runner(resources, holder="a")
        record = await runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))
        assert record.status == "succeeded"
        assert await free_codes(resources.store) == 2_500  # in batches of 1000
        again = await runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))
        assert again.status == "succeeded" and await free_codes(resources.store) == 2_500
