"""Export jobs end to end: 50,000 visits through the ``exports`` group, with progress,
an exact CSV, and a real worker process killed midway that resumes from its checkpoint.
The CSV is read where it lives, in the database (``export_chunks``).

The visits are committed straight into the history in big transactions (as the
API's visit writer would, only faster) and published by the in-process relay.
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from sluice.app.assembly import default_apps
from sluice.app.testing import Child, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.exports import jobs, visits
from sluice.builtin.links.exports.jobs import Job
from sluice.builtin.links.exports.retention import purge_finished
from sluice.builtin.links.exports.runner import ExportDeps, run_export
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.errors import HandlerError
from sluice.events import decode, utcnow
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.store import Store
from sluice.streams.messages import BatchHandler, Delivery, Message, fields_from_redis
from sluice.streams.spec import GroupSpec, runtime_settings
from tests.integration.export_helpers import (
    CODE,
    OTHERS,
    VISITS,
    all_published,
    seed,
    small_export,
    visit,
)
from tests.link_helpers import OWNER, add_link, add_user

pytestmark = pytest.mark.topologies("single", "cluster")

BATCH = 1_000  # sequence numbers per export window: about 57 windows here


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(export_batch=BATCH)


async def expected_rows(store: Store, upto: int) -> list[tuple[datetime, str, str, str, str]]:
    """The link's visits in the history up to ``upto``, as (time, visitor, referrer, browser,
    is_bot) in history order."""
    rows = []
    for stored in await store.events_after(0, upto + 1, types=["LinkVisited"]):
        event = decode(stored.payload)
        if stored.seq <= upto and isinstance(event, LinkVisited) and event.code == CODE:
            rows.append(
                (
                    event.occurred_at,
                    event.visitor,
                    event.referrer_host or "",
                    event.browser,
                    "true" if event.is_bot else "false",
                )
            )
    return rows


async def stored_csv(store: Store, job_id: str) -> bytes:
    """The job's CSV as stored: its chunks, which must follow each other without a gap."""
    chunks = await store.fetchall(
        "SELECT first_byte, data FROM export_chunks WHERE job_id = ? ORDER BY first_byte",
        (job_id,),
    )
    csv_bytes = b""
    for first, data in chunks:
        assert first == len(csv_bytes), "a gap or an overlap between chunks"
        csv_bytes += bytes(data)
    return csv_bytes


async def csv_rows(store: Store, job_id: str) -> list[tuple[datetime, str, str, str, str]]:
    text = (await stored_csv(store, job_id)).decode()
    header, *rows = list(csv.reader(io.StringIO(text, newline="")))
    assert header == [
        "visited_at",
        "visitor",
        "referrer_host",
        "browser",
        "is_bot",
        "country",
        "os",
        "device",
    ]
    assert all(row[0].endswith("Z") for row in rows)
    return [
        (datetime.fromisoformat(row[0].replace("Z", "+00:00")), row[1], row[2], row[3], row[4])
        for row in rows
    ]


class Sampler:
    """Reads the job row as often as it can, keeping every progress value seen."""

    def __init__(self, store: Store, job_id: str) -> None:
        self.store = store
        self.job_id = job_id
        self.progress: list[int] = []
        self.job: Job | None = None

    async def read(self) -> Job:
        job = await jobs.get_job(self.store, self.job_id)
        assert job is not None
        self.progress.append(job.progress)
        self.job = job
        return job

    async def succeeded(self) -> bool:
        return (await self.read()).status == "succeeded"

    def assert_rising_to_100(self) -> None:
        assert self.progress == sorted(self.progress), "progress went down"
        assert self.progress[-1] == 100
        assert len(set(self.progress)) >= 5, f"too few progress values seen: {set(self.progress)}"


async def test_a_50k_visit_export_reaches_100_with_rising_progress_and_exactly_those_visits(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., object]
) -> None:
    store = resources.store
    await seed(store)
    job, created = await jobs.request_export(store, OWNER, CODE, "trace-export")
    assert created
    async with store.transaction() as tx:  # after the request: outside its snapshot
        await tx.append(*(visit(VISITS + OTHERS + i, CODE) for i in range(100)))
    start_relay()
    start_worker("exports")

    sampler = Sampler(store, job.id)
    await wait_for(sampler.succeeded, timeout=60, interval=0.002)
    sampler.assert_rising_to_100()

    finished = sampler.job
    assert finished is not None and finished.error is None
    # One attempt; or, when a loaded machine held up the lock's renewal past its TTL (1 s
    # here, claim_idle_ms), a second one that took over from the first's checkpoint.
    assert finished.attempt == 1 or (finished.attempt == 2 and (finished.resumed_from or 0) > 0)
    assert finished.rows == VISITS
    expected = await expected_rows(store, job.snapshot_seq)
    assert len(expected) == VISITS
    assert await csv_rows(store, job.id) == expected
    assert len(await stored_csv(store, job.id)) == finished.cursor_bytes
    assert not (resources.config.data_dir / "exports").exists()


@pytest.mark.slow
async def test_a_worker_killed_midway_resumes_from_its_checkpoint_without_duplicates(
    resources: Resources, start_relay: Callable[..., Relay], spawn: Callable[..., Child]
) -> None:
    store = resources.store
    await seed(store)
    job, _ = await jobs.request_export(store, OWNER, CODE, "trace-export")
    start_relay()
    await all_published(store)
    worker = spawn("worker", "exports", "--consumer", "c1", SLUICE_EXPORT_BATCH="500")
    sampler = Sampler(store, job.id)

    async def a_third_done() -> bool:
        return (await sampler.read()).cursor_seq >= job.snapshot_seq // 3

    await wait_for(a_third_done, interval=0.002)
    worker.kill()
    at_kill = await sampler.read()
    assert at_kill.status == "running", "the export finished before the kill: nothing tested"
    assert 0 < at_kill.cursor_seq < at_kill.snapshot_seq
    # The checkpoint counts exactly the bytes stored: they commit together.
    [(checkpointed, stored)] = await store.fetchall(
        "SELECT cursor_bytes, (SELECT COALESCE(SUM(length(data)), 0) FROM export_chunks"
        " WHERE job_id = jobs.id) FROM jobs WHERE id = ?",
        (job.id,),
    )
    assert checkpointed == stored > 0
    # Bytes past the checkpoint (a bug, a hand-made repair): the next attempt drops them.
    async with store.transaction() as tx:
        [(end,)] = await tx.fetchall("SELECT cursor_bytes FROM jobs WHERE id = ?", (job.id,))
        await tx.execute(
            "INSERT INTO export_chunks (job_id, first_byte, data) VALUES (?, ?, ?)",
            (job.id, end, b"2026-03-01T00:00:00Z,torn-row"),
        )

    spawn("worker", "exports", "--consumer", "c1", SLUICE_EXPORT_BATCH="500")
    await wait_for(sampler.succeeded, timeout=60, interval=0.002)
    sampler.assert_rising_to_100()

    finished = sampler.job
    assert finished is not None
    # The second attempt started at the checkpoint the first one left, not at 0.
    assert (finished.attempt, finished.resumed_from) == (2, at_kill.cursor_seq)
    expected = await expected_rows(store, job.snapshot_seq)
    assert await csv_rows(store, job.id) == expected
    assert finished.rows == len(expected) == VISITS


async def test_two_deliveries_of_one_job_at_once_write_each_visit_once(
    resources: Resources,
) -> None:
    store = resources.store
    job = await small_export(store)
    deps = ExportDeps.from_resources(resources)
    # A relay duplicate reaching two consumers: the second waits for the first's lock.
    await asyncio.gather(run_export(job.id, deps), run_export(job.id, deps))

    finished = await jobs.get_job(store, job.id)
    assert finished is not None and finished.status == "succeeded"
    assert finished.attempt == 1
    expected = await expected_rows(store, job.snapshot_seq)
    assert await csv_rows(store, job.id) == expected


async def test_a_stale_attempt_stores_no_bytes_and_no_checkpoint(resources: Resources) -> None:
    store = resources.store
    job = await small_export(store)
    header = visits.header()
    stale = await jobs.begin_attempt(store, job.id, header)
    current = await jobs.begin_attempt(store, job.id, header)  # it lost its lock to this one
    assert stale is not None and current is not None
    assert (stale.attempt, current.attempt, current.cursor_bytes) == (1, 2, len(header))

    lines = b"2026-03-01T00:00:00Z,stale,,Other,false\r\n"

    async def window(attempt: Job, at: int) -> bool:
        return await jobs.checkpoint(
            store, attempt, cursor_seq=10, rows=1, progress=5, at=at, data=lines
        )

    assert not await window(stale, len(header))
    # Nor the current attempt, at any offset but the end of what is stored.
    assert not await window(current, 0)
    after = await jobs.get_job(store, job.id)
    assert after is not None and (after.cursor_seq, after.cursor_bytes) == (0, len(header))
    assert await stored_csv(store, job.id) == header
    assert await window(current, len(header))
    assert await stored_csv(store, job.id) == header + lines


async def test_a_failed_job_purged_then_redriven_starts_over_and_serves_its_result(
    resources: Resources,
) -> None:
    store = resources.store
    job = await small_export(store)
    started = await jobs.begin_attempt(store, job.id, visits.header())
    assert started is not None
    found = await visits.scan(store, CODE, 0, job.snapshot_seq // 2)
    assert await jobs.checkpoint(
        store,
        started,
        cursor_seq=job.snapshot_seq // 2,
        rows=len(found),
        progress=50,
        at=started.cursor_bytes,
        data=visits.csv_rows(found),
    )
    assert await jobs.give_up(store, job.id, "given up after 5 deliveries")
    # Retention removes what the failed job left, and marks it purged.
    assert await purge_finished(store, utcnow() + timedelta(seconds=1), 0) == 1
    assert await stored_csv(store, job.id) == b""

    await run_export(job.id, ExportDeps.from_resources(resources))  # the redriven delivery
    finished = await jobs.get_job(store, job.id)
    assert finished is not None
    assert (finished.status, finished.resumed_from, finished.purged_at) == ("succeeded", 0, None)
    assert finished.progress == 100
    assert await csv_rows(store, job.id) == await expected_rows(store, job.snapshot_seq)


async def give_up_on(
    resources: Resources, job: Job, handler: BatchHandler | None = None
) -> Consumer:
    """The last delivery the runtime allows, through the real exports group.

    Without ``handler``: every earlier delivery's worker died, so this one is over
    the limit and goes to the dead letters without being handled. With one: it is
    handled by ``handler`` instead of the export runner.
    """
    spec = default_apps().groups["exports"](resources)
    if handler is not None:
        spec = GroupSpec(spec.name, spec.aggregates, handler, spec.on_dead_letter)
    partition = resources.keys.partition_of(job.id)  # the job's: where its entry is
    consumer = Consumer(
        spec,
        resources.redis,
        resources.keys,
        "doomed",
        runtime_settings(resources.config),
        partition,
    )
    await consumer.ensure_groups()
    stream = resources.keys.stream("exports", partition)
    [(_, entries)] = await resources.redis.xreadgroup("exports", "doomed", {stream: ">"})
    [(entry_id, raw)] = [e for e in entries if fields_from_redis(e[1])["event_id"]]
    last = resources.config.max_deliveries + (0 if handler else 1)
    message = Message(stream, entry_id.decode(), fields_from_redis(raw), last)
    assert decode(message.fields["data"]).job_id == job.id  # type: ignore[union-attr]
    await consumer.process([message])
    return consumer


async def dead_letters_of(resources: Resources, job: Job) -> list[Any]:
    """The exports group's dead letters, all in the job's partition (checked): its entries."""
    keys = resources.keys
    mine = keys.partition_of(job.id)
    for partition in keys.numbers:
        if partition != mine:
            assert await resources.redis.xlen(keys.dead("exports", partition)) == 0
    letters: Any = await resources.redis.xrange(keys.dead("exports", mine))
    return list(letters)


async def test_a_job_whose_entry_is_dead_lettered_is_failed_and_a_redrive_finishes_it(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., object]
) -> None:
    store = resources.store
    job = await small_export(store)
    start_relay()
    await all_published(store)
    consumer = await give_up_on(resources, job)

    given_up = await jobs.get_job(store, job.id)
    assert given_up is not None
    assert (given_up.status, given_up.dead_lettered) == ("failed", True)
    assert given_up.finished_at is not None
    assert given_up.error is not None and "given up after" in given_up.error
    [letter] = await dead_letters_of(resources, job)

    assert await consumer.failures.redrive(letter[0].decode())
    start_worker("exports")

    await wait_for(Sampler(store, job.id).succeeded, timeout=30)
    finished = await jobs.get_job(store, job.id)
    assert finished is not None
    assert (finished.error, finished.dead_lettered, finished.progress) == (None, False, 100)
    expected = await expected_rows(store, job.snapshot_seq)
    assert await csv_rows(store, job.id) == expected


async def test_a_redrive_after_a_newer_export_of_the_link_leaves_the_old_job_failed(
    resources: Resources, start_relay: Callable[..., Relay]
) -> None:
    store = resources.store
    await add_link(store, CODE, "https://example.org/big")
    await add_user(store)
    old, _ = await jobs.request_export(store, OWNER, CODE, "trace-old")
    start_relay()
    await all_published(store)
    await give_up_on(resources, old)
    newer, created = await jobs.request_export(store, OWNER, CODE, "trace-new")
    assert created and newer.id != old.id  # the failed job does not block a new request

    await run_export(old.id, ExportDeps.from_resources(resources))  # the redriven delivery
    still = await jobs.get_job(store, old.id)
    assert still is not None and (still.status, still.dead_lettered) == ("failed", True)
    assert (await jobs.get_job(store, newer.id)).status == "queued"  # type: ignore[union-attr]


async def test_a_dead_letter_with_a_handler_outcome_leaves_the_job_to_its_runner(
    resources: Resources, start_relay: Callable[..., Relay]
) -> None:
    store = resources.store
    job = await small_export(store)
    start_relay()
    await all_published(store)

    async def another_worker_runs_it(
        deliveries: Sequence[Delivery],
    ) -> Mapping[tuple[str, str], BaseException]:
        error = HandlerError(f"export {job.id} is being run by another worker")
        return {d.message.key: error for d in deliveries}

    await give_up_on(resources, job, another_worker_runs_it)

    assert len(await dead_letters_of(resources, job)) == 1
    untouched = await jobs.get_job(store, job.id)
    assert untouched is not None
    assert (untouched.status, untouched.dead_lettered, untouched.error) == ("queued", False, None)
