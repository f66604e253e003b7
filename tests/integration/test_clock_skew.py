"""Once per occurrence with replicas whose clocks disagree by under a second
(docs/concepts/index.md).

Three scheduler replicas (cron tasks: ``Scheduler``; reminders:
``ReminderRunner``) run in this process, each on its own store connection and
Redis client, with clocks 0.8 s behind, exact and 0.8 s ahead (both take a
``clock``). The fast replica reaches each occurrence 1.6 s of real time before
the slow one, so the first claim of an occurrence is long made (and its run
long finished) when the last replica gets there. Each occurrence must still
run exactly once, with one effect, and none may be missed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from sluice.app.assembly import create_app, open_resources
from sluice.app.testing import wait_for
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.cron_runner import ReminderRunner
from sluice.builtin.reminders.events import ReminderDue
from sluice.config import Config
from sluice.events import decode, utcnow
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.loop import Scheduler
from sluice.scheduler.task_spec import Task, TaskContext
from tests.integration.helpers import Running

SKEWS = (-0.8, 0.0, 0.8)
SECOND = timedelta(seconds=1)


def skewed(offset: float) -> Callable[[], datetime]:
    def clock() -> datetime:
        return utcnow() + timedelta(seconds=offset)

    return clock


def consecutive(slots: list[datetime], step: int) -> bool:
    return all(b - a == step * SECOND for a, b in pairwise(slots))


async def test_skewed_scheduler_replicas_run_each_occurrence_once(
    config: Config, running: Running
) -> None:
    effects: list[tuple[str, str, datetime, float]] = []  # task, run id, slot, time.time()

    async def tick(ctx: TaskContext) -> None:
        effects.append((ctx.run.task, ctx.run.id, ctx.run.scheduled_for, time.time()))

    tasks = [
        Task("tick", parse_cron("* * * * * *", "UTC"), tick),
        Task("even", parse_cron("*/2 * * * * *", "UTC"), tick),
    ]
    async with AsyncExitStack() as stack:
        replicas = [await stack.enter_async_context(open_resources(config)) for _ in SKEWS]
        # Started together just after an even second, every replica's first occurrence of
        # each task is the same one; from any other start the fast replica leaves the next
        # occurrence to the others and may then skip the one after (the test below).
        await asyncio.sleep((int(time.time()) // 2 + 1) * 2 + 0.05 - time.time())
        started = time.time()
        for resources, offset in zip(replicas, SKEWS, strict=True):
            scheduler = Scheduler(resources, tasks, holder=f"skew{offset:+}", clock=skewed(offset))
            running.start(scheduler.run(running.stop))
        store = replicas[0].store

        async def six_ticks() -> bool:
            row = await store.fetchone(
                "SELECT COUNT(*) FROM task_runs WHERE task = 'tick' AND status = 'succeeded'"
            )
            return row is not None and int(row[0]) >= 6

        await wait_for(six_ticks, timeout=15)
        await running.close()  # before the connections close; runs in hand are interrupted
        stopped = time.time()
        rows = await store.fetchall(
            "SELECT task, id, scheduled_for, status FROM task_runs ORDER BY scheduled_for"
        )

    runs: dict[str, dict[datetime, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for task, run_id, slot, status in rows:
        runs[str(task)][datetime.fromisoformat(str(slot))].append((str(run_id), str(status)))
    for task, every in (("tick", 1), ("even", 2)):
        by_slot = runs[task]
        assert all(len(found) == 1 for found in by_slot.values()), (task, by_slot)
        slots = sorted(by_slot)
        # One effect per occurrence, by the run its record names.
        ran = Counter((slot, run_id) for name, run_id, slot, _ in effects if name == task)
        assert ran == {(slot, by_slot[slot][0][0]): 1 for slot in slots}, (task, ran)
        # None missed: from the first occurrence after the start to the stop, every one.
        assert slots[0].timestamp() <= started + every + 0.8, (task, slots[0], started)
        assert consecutive(slots, every), (task, slots)
        assert slots[-1].timestamp() >= stopped - every - 0.8 - 0.5, (task, slots[-1], stopped)
        for slot in slots:
            [(_, status)] = by_slot[slot]
            # The last one may have been running when the replicas were stopped.
            assert status == "succeeded" or slot == slots[-1], (task, slot, status)
    # The skew was real: the fast replica ran occurrences before their instant.
    assert min(at - slot.timestamp() for _, _, slot, at in effects) < -0.5


@pytest.fixture
def reminders_config(make_config: Callable[..., Config]) -> Config:
    return make_config(reminder_min_interval=1)


async def test_skewed_reminder_runners_fire_each_occurrence_once(
    reminders_config: Config, aiohttp_client: Callable[..., Awaitable[Any]], running: Running
) -> None:
    client = await aiohttp_client(create_app(reminders_config))
    user = {"email": "ada@example.org", "password": "correct horse", "name": "Ada"}
    assert (await client.post("/v1/users", json=user)).status == 201
    token = (await (await client.post("/v1/tokens", json=user)).json())["token"]
    auth = {"Authorization": f"Bearer {token}"}
    ids = {}
    for cron, every in (("* * * * * *", 1), ("*/2 * * * * *", 2)):
        body = {"cron": cron, "timezone": "Europe/Berlin", "text": f"every {every} s"}
        response = await client.post("/v1/reminders", json=body, headers=auth)
        assert response.status == 201, await response.text()
        ids[every] = (await response.json())["id"]
    created = utcnow()

    async with AsyncExitStack() as stack:
        runners = []
        for offset in SKEWS:
            resources = await stack.enter_async_context(open_resources(reminders_config))
            runner = ReminderRunner(resources, holder=f"skew{offset:+}", clock=skewed(offset))
            running.start(runner.run(running.stop))
            runners.append(runner)
        store = resources.store

        async def six_fired() -> bool:
            return len(await stored.occurrences(store, ids[1])) >= 6

        await wait_for(six_fired, timeout=15)
        await running.close()
        stopped = utcnow()
        history = await store.events_after(0, 100_000, types=["ReminderDue"])
        occurrences = {every: await stored.occurrences(store, rid) for every, rid in ids.items()}

    due: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)  # slot, committed at
    for row in history:
        event = decode(row.payload)
        assert isinstance(event, ReminderDue)
        committed = datetime.fromisoformat(str(row.created_at).replace("Z", "+00:00"))
        due[event.reminder_id].append((event.scheduled_for, committed))
    for every, reminder_id in ids.items():
        slots = occurrences[every]
        # One row and one ReminderDue per occurrence, none missed from the creation on.
        assert sorted(slot for slot, _ in due[reminder_id]) == slots, every
        assert slots[0] <= created + every * SECOND, (every, slots[0], created)
        assert consecutive(slots, every), (every, slots)
        assert slots[-1] >= stopped - (every + 1.5) * SECOND, (every, slots[-1], stopped)
    assert sum(r.counters.fired for r in runners) == sum(len(s) for s in occurrences.values())
    # The skew was real: occurrences committed before their instant, by the real clock.
    early = [slot - at for slots in due.values() for slot, at in slots]
    assert max(early) > timedelta(seconds=0.5)


async def test_a_fast_clock_does_not_skip_an_occurrence_after_a_run_begun_on_a_slower_one(
    config: Config, running: Running
) -> None:
    """A task busy 1.5 s of its 2 s period never overlaps itself with true clocks. Started
    0.5 s before an occurrence S, the replica 0.8 s ahead leaves S to the others (to its
    clock S is past); it then reaches S + 2 at S + 1.2 of real time, while the run of S
    still holds the task's lock, and skips S + 2, which no replica runs."""
    ran: list[datetime] = []

    async def busy(ctx: TaskContext) -> None:
        ran.append(ctx.run.scheduled_for)
        await asyncio.sleep(1.5)

    task = Task("busy", parse_cron("*/2 * * * * *", "UTC"), busy)
    async with AsyncExitStack() as stack:
        replicas = [await stack.enter_async_context(open_resources(config)) for _ in SKEWS]
        first = (int(time.time()) // 2 + 2) * 2  # S: an even second, 2 to 4 s away
        await asyncio.sleep(first - 0.5 - time.time())
        for resources, offset in zip(replicas, SKEWS, strict=True):
            scheduler = Scheduler(resources, [task], holder=f"skew{offset:+}", clock=skewed(offset))
            running.start(scheduler.run(running.stop))

        async def third_ran() -> bool:
            return any(slot.timestamp() >= first + 4 for slot in ran)

        await wait_for(third_ran, timeout=10)
        await running.close()
    occurrences = [datetime.fromtimestamp(first + i, UTC) for i in (0, 2, 4)]
    assert [slot for slot in ran if slot <= occurrences[-1]] == occurrences
