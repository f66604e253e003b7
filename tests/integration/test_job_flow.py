"""Delayed jobs' priorities and debounce (docs/concepts/job-flow.md): a job moved again
and again within its window runs once and no later than its longest wait; a group with
a backlog is given its due jobs highest priority first, a low one rising as it waits;
rows an older release wrote still fire."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import msgspec
import pytest

from sluice.app.assembly import loaded_apps, open_resources
from sluice.app.job_flow import SLOT_LEASE, JobFlow
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.events import JobDue, utcnow
from sluice.process.resources import Resources
from sluice.scheduler.one_shots import OneShotRunner
from sluice.store.users import db_time
from sluice.streams.messages import Delivery, Duplicate, Message
from tests.app_helpers import AppDir
from tests.integration.helpers import Running
from tests.integration.job_flow_helpers import FLOW


@pytest.fixture
async def flow(app_dir: AppDir, make_config: Callable[..., Config]) -> AsyncIterator[Resources]:
    app_dir.module("flow_app", FLOW)
    async with open_resources(make_config(apps="flow_app")) as resources:
        yield resources


async def _fired(resources: Resources) -> list[JobDue]:
    rows = await resources.store.fetchall(
        "SELECT payload FROM events WHERE type = 'JobDue' ORDER BY seq"
    )
    return [msgspec.json.decode(bytes(row[0]), type=JobDue) for row in rows]


async def _run(resources: Resources, events: list[JobDue], again: bool = False) -> None:
    """What the jobs' worker does with the entries, in their order (``again``: each a
    redelivery of one it ran, acked as a duplicate)."""
    group = loaded_apps(resources.config).groups["flow-jobs"](resources)
    for event in events:
        fields = {"event_id": event.event_id, "type": "JobDue", "trace_id": "t"}
        outcomes = await group.handler([Delivery(Message("sluice:d", "1-1", fields, 1), event)])
        assert [type(o) for o in outcomes.values()] == ([Duplicate] if again else [])


async def test_a_job_moved_a_hundred_times_runs_once_no_later_than_its_max_wait(
    flow: Resources, running: Running
) -> None:
    reindex = loaded_apps(flow.config).jobs["reindex"]
    payload = reindex.payload
    flow_due = JobFlow.of(loaded_apps(flow.config).jobs.values(), 100, 60).due()
    running.start(OneShotRunner(flow, holder="s", poll=0.05, due=flow_due).run(running.stop))
    first = utcnow()
    for i in range(100):  # over about 2.5 s, each within the 2 s window of the one before
        async with flow.store.transaction() as tx:
            due = await reindex.schedule(tx, payload(note=f"move {i}"), key="catalog")
        assert due <= first + timedelta(seconds=4.05)  # never past max_wait
        await asyncio.sleep(0.025)
    last = utcnow()
    assert last < first + timedelta(seconds=4), "the moves took longer than max_wait"
    assert await _fired(flow) == []

    async def fired() -> bool:
        return len(await _fired(flow)) == 1

    await wait_for(fired, timeout=20)
    [event] = await _fired(flow)
    assert event.key == "catalog" and event.scheduled_for <= first + timedelta(seconds=4.05)
    assert event.scheduled_for >= min(last, first + timedelta(seconds=4))  # moved each time
    assert event.occurred_at <= event.scheduled_for + timedelta(seconds=2)  # fired at it
    assert msgspec.json.decode(event.payload)["note"] == "move 99"  # the last one's payload
    await _run(flow, [event])
    await _run(flow, [event], again=True)  # redelivered: not a second run
    runs = await flow.store.fetchall("SELECT note FROM job_runs WHERE job = 'reindex'")
    assert runs == [("move 99",)]
    assert await flow.store.fetchone("SELECT COUNT(*) FROM delayed_jobs") == (0,)


async def test_a_later_urgent_job_goes_before_a_backlog_of_low_ones(flow: Resources) -> None:
    jobs = loaded_apps(flow.config).jobs
    report = jobs["report"]
    firing = JobFlow.of(jobs.values(), backlog=5, aging_seconds=3600)
    before = utcnow() - timedelta(seconds=1)
    async with flow.store.transaction() as tx:
        for i in range(20):  # priority 0, the job's own; due in this order
            at = before + timedelta(milliseconds=i)
            await report.schedule(tx, report.payload(note=f"low {i}"), key=f"low-{i}", at=at)
    first = await firing.fire_due(flow.store, utcnow(), 500)
    assert [e.key for e in first] == [f"low-{i}" for i in range(5)]  # the group's room
    async with flow.store.transaction() as tx:
        await report.schedule(
            tx, report.payload(note="urgent"), key="urgent", at=utcnow(), priority=9
        )
    assert await firing.fire_due(flow.store, utcnow(), 500) == []  # no room: all wait
    await _run(flow, first)  # the worker ran the five: their room is free again
    second = await firing.fire_due(flow.store, utcnow(), 500)
    assert [e.key for e in second] == ["urgent", *(f"low-{i}" for i in range(5, 9))]
    assert second[0].priority == 9 and second[1].priority == 0
    await _run(flow, second)
    runs = await flow.store.fetchall("SELECT note FROM job_runs ORDER BY seq")
    assert [r[0] for r in runs][5] == "urgent"  # before the fifteen low ones still due


async def test_a_low_job_among_a_steady_stream_of_urgent_ones_runs_within_the_aging_bound(
    flow: Resources,
) -> None:
    jobs = loaded_apps(flow.config).jobs
    report = jobs["report"]
    aging = 0.1  # a level per 0.1 s: overtaken only by jobs due up to 0.9 s after it
    firing = JobFlow.of(jobs.values(), backlog=1, aging_seconds=aging)
    low_due = utcnow()
    async with flow.store.transaction() as tx:
        await report.schedule(tx, report.payload(note="low"), key="low", at=low_due)
    deadline = utcnow() + timedelta(seconds=9 * aging + 10)
    n, low_fired = 0, None
    while low_fired is None and utcnow() < deadline:
        n += 1  # an urgent job falls due each round, before the low one is fired
        async with flow.store.transaction() as tx:
            await report.schedule(
                tx, report.payload(note="high"), key=f"high-{n}", at=utcnow(), priority=9
            )
        fired = await firing.fire_due(flow.store, utcnow(), 500)
        assert len(fired) == 1  # the group takes one at a time
        if fired[0].key == "low":
            low_fired = fired[0].occurred_at
        await _run(flow, fired)
    assert low_fired is not None, f"the low job starved behind {n} urgent ones"
    waited = (low_fired - low_due).total_seconds()
    assert 9 * aging - 0.05 <= waited <= 9 * aging + 5  # overtaken until it aged to 9


async def test_rows_an_older_release_wrote_still_fire(flow: Resources) -> None:
    jobs = loaded_apps(flow.config).jobs
    reindex = jobs["reindex"]
    then = utcnow() - timedelta(seconds=2)
    async with flow.store.transaction() as tx:  # the columns an older release knew
        await tx.execute(
            "INSERT INTO delayed_jobs (job, key, due_at, payload, trace_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            ("report", "old", db_time(then), b'{"note":"old"}', "t", db_time(then)),
        )
        await tx.execute(
            "INSERT INTO delayed_jobs (job, key, due_at, payload, trace_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                "reindex",
                "old",
                db_time(utcnow() + timedelta(days=1)),
                b'{"note":"x"}',
                "t",
                db_time(then),
            ),
        )
    async with flow.store.transaction() as tx:  # its scheduling time bounds the debounce
        due = await reindex.schedule(tx, reindex.payload(note="moved"), key="old")
    assert due <= then + timedelta(seconds=4.01)
    firing = JobFlow.of(jobs.values(), backlog=100, aging_seconds=60)
    fired = await firing.fire_due(flow.store, utcnow() + timedelta(seconds=3), 500)
    assert sorted((e.job, e.priority) for e in fired) == [("reindex", 5), ("report", 5)]
    await _run(flow, fired)
    runs = await flow.store.fetchall("SELECT job, note FROM job_runs ORDER BY job")
    assert runs == [("reindex", "moved"), ("report", "old")]
    assert await flow.store.fetchone("SELECT COUNT(*) FROM job_slots") == (0,)


async def test_a_dead_lettered_job_gives_its_place_back_and_a_lost_one_lapses(
    flow: Resources,
) -> None:
    jobs = loaded_apps(flow.config).jobs
    report = jobs["report"]
    firing = JobFlow.of(jobs.values(), backlog=1, aging_seconds=60)
    async with flow.store.transaction() as tx:
        for key in ("a", "b"):
            await report.schedule(tx, report.payload(note=key), key=key, at=utcnow())
    [fired] = await firing.fire_due(flow.store, utcnow(), 500)
    assert await firing.fire_due(flow.store, utcnow(), 500) == []  # "a" holds the room
    group = loaded_apps(flow.config).groups["flow-jobs"](flow)
    assert group.on_dead_letter is not None
    fields = {"event_id": fired.event_id, "type": "JobDue", "trace_id": "t"}
    await group.on_dead_letter(Message("sluice:d", "1-1", fields, 5), RuntimeError("gave up"))
    assert [e.key for e in await firing.fire_due(flow.store, utcnow(), 500)] == ["b"]
    async with flow.store.transaction() as tx:
        await report.schedule(tx, report.payload(note="c"), key="c", at=utcnow())
    assert await firing.fire_due(flow.store, utcnow(), 500) == []  # "b" holds it now
    later = utcnow() + SLOT_LEASE + timedelta(seconds=1)  # b's run never came: it lapsed
    assert [e.key for e in await firing.fire_due(flow.store, later, 500)] == ["c"]
