"""The archive-history task moves exactly the old, published events into segments, and a
run stopped or failing between segments leaves every event exactly once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sluice.app.assembly import all_tasks
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config, load_config
from sluice.errors import ConfigError
from sluice.events import utcnow
from sluice.history import archive
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from sluice.scheduler.runner import Runner
from sluice.store import Store
from tests.engine_app import APPS, Pinged
from tests.integration.archive_helpers import (
    LONG_AGO,
    archived_rows,
    assert_each_once,
    hot_rows,
    make_old,
    run_archive,
)

pytestmark = pytest.mark.apps(APPS)  # the engine's test app (tests/engine_app)


async def seed(store: Store) -> None:
    """Pings at seq 1-40, visits at 41-340, pings at 341-350."""
    async with store.transaction() as tx:
        await tx.append(*(Pinged(source="a", note=f"v{i}") for i in range(40)))
    async with store.transaction() as tx:
        await tx.append(*(LinkVisited(code="c", visitor=f"x{i}") for i in range(300)))
    async with store.transaction() as tx:
        await tx.append(*(Pinged(source="b", note=f"w{i}") for i in range(10)))


async def test_archive_moves_exactly_the_old_published_events(resources: Resources) -> None:
    store = resources.store
    await seed(store)
    await make_old(store, 290)  # 291-350 are recent
    await store.set_position(POSITION, 240)  # 241-350 are not published yet
    before = await hot_rows(store)

    moved = await run_archive(store, segment_events=60, min_events=10)

    assert [(m.aggregate, m.first_seq, m.last_seq, m.events) for m in moved] == [
        ("pings", 1, 40, 40),
        ("visits", 41, 100, 60),
        ("visits", 101, 160, 60),
        ("visits", 161, 220, 60),
        ("visits", 221, 240, 20),
    ]
    archived = await assert_each_once(store, before)
    assert [r[0] for r in archived] == list(range(1, 241))
    assert [r[0] for r in await hot_rows(store)] == list(range(241, 351))
    assert all(r[6] == LONG_AGO for r in archived)
    assert await store.max_seq() == 350

    # Published later: the old ones move, the recent ones stay, the head never moves.
    await store.set_position(POSITION, 350)
    moved = await run_archive(store, segment_events=60, min_events=10)
    assert [(m.first_seq, m.last_seq) for m in moved] == [(241, 290)]
    assert [r[0] for r in await hot_rows(store)] == list(range(291, 351))
    await make_old(store, 350)
    before = await archived_rows(store) + await hot_rows(store)
    await run_archive(store, segment_events=1000, min_events=1)
    assert [r[0] for r in await hot_rows(store)] == [350]  # the head of the history
    await assert_each_once(store, before)
    assert await store.max_seq() == 350


async def test_fewer_old_events_than_a_segment_minimum_stay_in_the_table(
    resources: Resources,
) -> None:
    store = resources.store
    await seed(store)
    await make_old(store, 350)
    await store.set_position(POSITION, 350)
    before = await hot_rows(store)
    moved = await run_archive(store, segment_events=100, min_events=50)
    # Articles: 1-40 and 341-349 (350 is the head) are 49, below 50; visits: 3 x 100.
    assert [(m.aggregate, m.events) for m in moved] == [("visits", 100)] * 3
    await assert_each_once(store, before)


async def test_a_run_stopped_between_segments_leaves_each_event_once_and_the_next_finishes(
    resources: Resources,
) -> None:
    store = resources.store
    await seed(store)
    await make_old(store, 350)
    await store.set_position(POSITION, 350)
    before = await hot_rows(store)
    bounds = await archive.limits(store, utcnow(), 7, 350, segment_events=50, min_events=1)
    seen: list[archive.Moved] = []

    async def lock_lost_after_two(segment: archive.Moved) -> None:
        seen.append(segment)
        if len(seen) == 2:
            raise RuntimeError("lock lost")  # what ctx.checkpoint raises, in effect

    with pytest.raises(RuntimeError):
        await archive.archive(store, bounds, after_segment=lock_lost_after_two)
    assert len(await archived_rows(store)) == 49 + 50  # the pings' segment, one of visits
    await assert_each_once(store, before)

    await run_archive(store, segment_events=50, min_events=1)
    archived = await assert_each_once(store, before)
    assert len(archived) == 349


async def test_a_failing_segment_transaction_moves_nothing_of_that_segment(
    resources: Resources,
) -> None:
    store = resources.store
    await seed(store)
    await make_old(store, 350)
    await store.set_position(POSITION, 350)
    before = await hot_rows(store)
    # A segment row already starting at 91 makes the second visits segment's INSERT fail.
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO history_segments (aggregate, first_seq, last_seq, first_at, last_at,"
            " events, types, bytes, data) VALUES ('x', 91, 91, '', '', 0, '{}', 0, ?)",
            (b"",),
        )
    with pytest.raises(Exception) as failed:
        await run_archive(store, segment_events=50, min_events=1)
    assert not isinstance(failed.value, AssertionError)
    async with store.transaction() as tx:
        await tx.execute("DELETE FROM history_segments WHERE aggregate = 'x'")
    archived = await assert_each_once(store, before)
    # The pings' segment (1-40, 341-349), then visits 41-90; the next one failed.
    assert sorted(r[0] for r in archived) == [*range(1, 91), *range(341, 350)]

    await run_archive(store, segment_events=50, min_events=1)
    assert len(await assert_each_once(store, before)) == 349


async def test_the_task_archives_through_the_scheduler_and_runs_hourly_at_minute_17(
    resources: Resources,
) -> None:
    store = resources.store
    for start in range(0, 12_000, 3_000):
        async with store.transaction() as tx:
            await tx.append(
                *(LinkVisited(code="c", visitor=f"x{i}") for i in range(start, start + 3_000))
            )
    await make_old(store, 12_000)
    await store.set_position(POSITION, 12_000)
    before = await hot_rows(store)
    task = all_tasks(resources.config)["archive-history"]
    runner = Runner(resources, holder="a")
    record = await runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))

    assert record.status == "succeeded" and record.cursor == "visits:11999"
    # The head stays (the run's own events, TaskRunStarted..., came after it).
    assert await archived_rows(store) == before[:-1]
    assert [r for r in await hot_rows(store) if r[2] == "LinkVisited"] == before[-1:]
    moment = datetime(2026, 3, 1, 12, 20, tzinfo=UTC)
    assert task.schedule.next_after(moment) == datetime(2026, 3, 1, 13, 17, tzinfo=UTC)


def test_the_hot_window_is_a_whole_number_of_days_from_one(config: Config) -> None:
    assert config.history_hot_days == 7
    assert load_config({"SLUICE_HISTORY_HOT_DAYS": "30"}).history_hot_days == 30
    for bad in ("0", "-1", "seven"):
        with pytest.raises(ConfigError, match="SLUICE_HISTORY_HOT_DAYS"):
            load_config({"SLUICE_HISTORY_HOT_DAYS": bad})
    with pytest.raises(ConfigError, match="must cover SLUICE_STREAM_RETENTION"):
        load_config({"SLUICE_HISTORY_HOT_DAYS": "1", "SLUICE_STREAM_RETENTION": "90000"})
