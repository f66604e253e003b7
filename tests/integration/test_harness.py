"""The in-process harness of ``sluice.app.testing``: an app's routes, relay, groups,
projections, delayed jobs and tasks run in the test's event loop by the engine's own
parts, drained until nothing is pending; failures are reported, not lost."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from sluice.app.testing import DeadLettered, Harness, HarnessFactory, TaskFailed, open_harness
from sluice.config import Config
from tests.app_helpers import AppDir

CRATES = """
from collections.abc import Sequence
from datetime import timedelta
from typing import ClassVar

import msgspec
from aiohttp import web
from sluice.app import (
    App, Event, HandlerContext, JobContext, ProjectionContext, TaskContext, Tx, json_response,
    read_json, store,
)

app = App("crates")
app.aggregate("crates", key="crate_id")
app.migration(1, "crates", '''
    CREATE TABLE crates (
        id TEXT PRIMARY KEY,
        stamps INTEGER NOT NULL DEFAULT 0,
        delivered INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    CREATE TABLE crate_calls (event_id TEXT NOT NULL, attempt INTEGER NOT NULL);
''')
# Attempts a crate fails before its handler succeeds ("never": it always fails).
FLAKY: dict[str, int] = {}


@app.event
class CrateSent(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "crates"
    crate_id: str
    poison: bool = False


@app.event
class CrateStamped(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "crates"
    crate_id: str


@app.event
class CratesCounted(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "crates"
    crate_id: str = "all"
    crates: int


class Send(msgspec.Struct, frozen=True):
    crate_id: str
    poison: bool = False


class Deliver(msgspec.Struct, frozen=True):
    crate_id: str


@app.route("POST", "/v1/crates", doc={"operationId": "sendCrate", "summary": "send",
           "responses": {"201": {"description": "sent"}}})
async def send(request: web.Request) -> web.Response:
    body = await read_json(request, Send)
    async with store(request).transaction() as tx:
        await tx.execute("INSERT INTO crates (id) VALUES (?)", (body.crate_id,))
        await tx.append(CrateSent(crate_id=body.crate_id, poison=body.poison))
        await deliver.schedule(tx, Deliver(body.crate_id), key=body.crate_id,
                               delay=timedelta(hours=1))
    return json_response({"id": body.crate_id}, 201)


stamping = app.group("stamping", max_deliveries=3, retry_base_ms=60_000)


@stamping.once(CrateSent)
async def stamp(event: CrateSent, tx: Tx, ctx: HandlerContext) -> None:
    await tx.execute("UPDATE crates SET stamps = stamps + 1 WHERE id = ?", (event.crate_id,))
    if event.poison:  # after the write: the failure must take it back
        raise RuntimeError(f"crate {event.crate_id} cannot be stamped")
    await tx.append(CrateStamped(crate_id=event.crate_id))
    if event.crate_id == "loop":  # a handler that feeds itself: a drain never ends
        await tx.append(CrateSent(crate_id="loop"))


tracking = app.group("tracking", retry_base_ms=60_000)


@tracking.on(CrateStamped)
async def track(event: CrateStamped, ctx: HandlerContext) -> None:
    async with ctx.store.transaction() as tx:
        await tx.execute("INSERT INTO crate_calls (event_id, attempt) VALUES (?, ?)",
                         (event.event_id, ctx.attempt))
    if ctx.attempt <= FLAKY.get(event.crate_id, 0):
        raise LookupError("the tracking service lost the crate")
    if event.crate_id == "down":  # an outage, not the entry's fault: held, not retried
        raise ConnectionError("the tracking service does not answer")


counts = app.projection("crate-counts", events=(CrateSent, CrateStamped), schema='''
    CREATE TABLE crate_counts{s} (kind TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
''', tables=("crate_counts",))


@counts.apply
async def apply(events: Sequence[Event], tx: Tx, ctx: ProjectionContext) -> None:
    table = ctx.table("crate_counts")
    for event in events:
        await tx.execute(
            f"INSERT INTO {table} (kind, n) VALUES (?, 1)"
            f" ON CONFLICT (kind) DO UPDATE SET n = {table}.n + 1", (type(event).__name__,))


@app.job("deliver", payload=Deliver)
async def deliver(job: Deliver, tx: Tx, ctx: JobContext) -> None:
    await tx.execute("UPDATE crates SET delivered = delivered + 1 WHERE id = ?", (job.crate_id,))


@app.task("count-crates", cron="0 0 3 * * *")
async def count_crates(ctx: TaskContext) -> None:
    row = await ctx.resources.store.fetchone("SELECT COUNT(*) FROM crates")
    if row is None or not row[0]:
        raise LookupError("no crate to count")
    async with ctx.resources.store.transaction() as tx:
        await tx.append(CratesCounted(crates=int(row[0])))
"""


@pytest.fixture
async def harness(app_dir: AppDir, make_config: Callable[..., Config]) -> AsyncIterator[Harness]:
    app_dir.module("crates_app", CRATES)
    async with open_harness(make_config(apps="crates_app")) as opened:
        yield opened


async def _send(h: Harness, crate_id: str, *, poison: bool = False) -> None:
    async with h.client.post("/v1/crates", json={"crate_id": crate_id, "poison": poison}) as r:
        assert r.status == 201, await r.text()


async def _row(h: Harness, crate_id: str) -> tuple[int, int]:
    row = await h.store.fetchone("SELECT stamps, delivered FROM crates WHERE id = ?", (crate_id,))
    assert row is not None
    return int(row[0]), int(row[1])


def _types(events: list[object]) -> list[str]:
    return [type(e).__name__ for e in events]


@pytest.mark.topologies("single", "cluster")
async def test_a_drain_runs_what_a_route_committed_through_every_group_once(
    harness: Harness,
) -> None:
    await _send(harness, "p1")
    await _send(harness, "p2")
    assert await harness.handled("stamping") == []  # nothing runs before the drain
    drained = await harness.drain()
    # Each CrateSent, then each CrateStamped the once-handler appended: two rounds.
    assert (drained.published, drained.retried, drained.failures) == (4, 0, ())
    stamped = await harness.handled("stamping")
    assert [(type(e).__name__, e.crate_id) for e in stamped] == [  # type: ignore[attr-defined]
        ("CrateSent", "p1"),
        ("CrateSent", "p2"),
    ]
    assert _types(await harness.handled("tracking")) == ["CrateStamped"] * 2
    assert _types(await harness.handled("crate-counts")) == ["CrateSent"] * 2 + ["CrateStamped"] * 2
    counted = await harness.store.fetchall("SELECT kind, n FROM crate_counts ORDER BY kind")
    assert [tuple(r) for r in counted] == [("CrateSent", 2), ("CrateStamped", 2)]
    assert await _row(harness, "p1") == (1, 0)
    again = await harness.drain()  # nothing pending: nothing runs twice
    assert (again.published, again.retried) == (0, 0)
    assert await _row(harness, "p1") == (1, 0)
    assert len(await harness.events("CrateStamped")) == 2


async def test_a_failure_is_retried_at_once_and_a_dead_letter_raises_with_its_error(
    harness: Harness,
) -> None:
    import crates_app  # type: ignore[import-not-found]

    crates_app.FLAKY["p1"] = 2  # tracking fails twice, then succeeds
    await _send(harness, "p1")
    await _send(harness, "bad", poison=True)
    with pytest.raises(DeadLettered) as raised:
        await harness.drain()  # no wait for the minute of backoff the groups declare
    (failure,) = raised.value.failures
    assert (failure.group, failure.event_type, failure.deliveries) == ("stamping", "CrateSent", 3)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert str(raised.value.__cause__) == "crate bad cannot be stamped"
    assert "stamping dead-lettered CrateSent" in str(raised.value)
    (letter,) = await harness.dead_letters("stamping")
    assert (letter.event_id, letter.deliveries) == (failure.event_id, 3)
    assert "cannot be stamped" in letter.error
    assert await _row(harness, "bad") == (0, 0)  # each attempt's write was rolled back
    calls = await harness.store.fetchall("SELECT attempt FROM crate_calls ORDER BY attempt")
    assert [int(r[0]) for r in calls] == [1, 2, 3]  # the flaky one: retried until it worked
    assert _types(await harness.handled("tracking")) == ["CrateStamped"]
    assert await harness.drain() is not None  # reported once, not again


async def test_a_drain_can_return_its_dead_letters_instead(harness: Harness) -> None:
    await _send(harness, "bad", poison=True)
    drained = await harness.drain(raise_dead_letters=False)
    assert [(f.group, f.deliveries) for f in drained.failures] == [("stamping", 3)]
    assert drained.retried == 2


async def test_delayed_jobs_fire_when_the_clock_is_advanced_to_them(harness: Harness) -> None:
    await _send(harness, "p1")
    await harness.drain()
    assert await _row(harness, "p1") == (1, 0)
    assert (await harness.advance(timedelta(minutes=59))).jobs_fired == 0
    assert await _row(harness, "p1") == (1, 0)
    assert (await harness.advance(60)).jobs_fired == 1
    assert await _row(harness, "p1") == (1, 1)
    assert _types(await harness.handled("crates-jobs")) == ["JobDue"]
    assert (await harness.advance(timedelta(days=2))).jobs_fired == 0  # once


async def test_a_task_runs_with_its_run_record_and_a_failing_one_raises(harness: Harness) -> None:
    with pytest.raises(TaskFailed, match=r"count-crates failed: .*no crate to count"):
        await harness.run_task("count-crates")
    failed = await harness.run_task("count-crates", raise_failure=False)
    assert (failed.status, failed.task) == ("failed", "count-crates")
    await _send(harness, "p1")
    run = await harness.run_task("count-crates")
    assert run.status == "succeeded" and run.error is None
    await harness.drain()
    (counted,) = await harness.events("CratesCounted")
    assert counted.crates == 1  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"no task 'nope'; the tasks: .*count-crates"):
        await harness.run_task("nope")


async def test_a_replay_rebuilds_a_projection_from_the_history(harness: Harness) -> None:
    for crate in ("p1", "p2", "p3"):
        await _send(harness, crate)
    await harness.drain()
    async with harness.store.transaction() as tx:
        await tx.execute("DELETE FROM crate_counts")
    assert await harness.replay("crate-counts") == 6
    counted = await harness.store.fetchall("SELECT kind, n FROM crate_counts ORDER BY kind")
    assert [tuple(r) for r in counted] == [("CrateSent", 3), ("CrateStamped", 3)]
    assert len(await harness.handled("crate-counts")) == 6  # the replayed ones count


async def test_a_drain_that_never_ends_says_so(harness: Harness) -> None:
    await _send(harness, "loop")
    with pytest.raises(TimeoutError, match=r"still busy after 1.0 s"):
        await harness.drain(timeout=1.0)


async def test_a_drain_held_by_an_outage_that_never_ends_says_so(harness: Harness) -> None:
    await _send(harness, "down")
    with pytest.raises(TimeoutError, match=r"still busy after 1.0 s"):
        await harness.drain(timeout=1.0)


async def test_unknown_groups_and_projections_are_refused_naming_the_known_ones(
    harness: Harness,
) -> None:
    with pytest.raises(ValueError, match=r"no group 'nope'.*stamping"):
        await harness.handled("nope")
    with pytest.raises(ValueError, match=r"no projection 'nope'; the projections: .*crate-counts"):
        await harness.replay("nope")


async def test_the_fixture_opens_harnesses_on_either_store_that_share_nothing(
    app_dir: AppDir, sluice_harness: HarnessFactory, sluice_store_kind: str
) -> None:
    app_dir.module("crates_app", CRATES)
    first = await sluice_harness("crates_app", store=sluice_store_kind)
    second = await sluice_harness("crates_app", store=sluice_store_kind)
    assert first.config.postgres == (sluice_store_kind == "postgres")
    await _send(first, "p1")
    await _send(second, "p2")
    await first.drain()
    assert [e.crate_id for e in await first.handled("stamping")] == ["p1"]  # type: ignore[attr-defined]
    assert await second.handled("stamping") == []  # its own database and Redis keys
    await second.drain()
    assert [e.crate_id for e in await second.handled("stamping")] == ["p2"]  # type: ignore[attr-defined]
