"""An app's groups, jobs and tables, run by the engine that runs sluice's own: each event
applied once by a once-handler, failures retried and dead-lettered by the group's own
settings, delayed jobs fired once whatever the number of schedulers, and the admin
routes serving the app's groups and events like sluice's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import msgspec
import pytest

from sluice.app.assembly import loaded_apps, open_resources
from sluice.app.job_flow import JobFlow
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.events import EVENT_TYPES, Event, JobDue, utcnow
from sluice.process.resources import Resources
from sluice.records.dead_letters import list_dead_letters
from sluice.scheduler.one_shots import OneShotRunner
from sluice.streams.messages import Delivery, Duplicate, Message
from tests.app_helpers import AppDir
from tests.integration.helpers import Running

SAMPLE = """
from typing import ClassVar

import msgspec
from sluice.app import App, Event, HandlerContext, JobContext, Tx

app = App("sample")
app.aggregate("parcels", key="parcel_id")
app.migration(1, "parcels", '''
    CREATE TABLE parcels (
        id TEXT PRIMARY KEY,
        stamps INTEGER NOT NULL DEFAULT 0,
        delivered INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
''')


@app.event
class ParcelSent(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "parcels"
    parcel_id: str
    poison: bool = False


stamping = app.group("stamping", max_deliveries=2, retry_base_ms=20)


@stamping.once(ParcelSent)
async def stamp(event: ParcelSent, tx: Tx, ctx: HandlerContext) -> None:
    await tx.execute("UPDATE parcels SET stamps = stamps + 1 WHERE id = ?", (event.parcel_id,))
    if event.poison:  # after the write: the failure must take it back
        raise RuntimeError("this parcel cannot be stamped")


class Deliver(msgspec.Struct, frozen=True):
    parcel_id: str


@app.job("deliver", payload=Deliver)
async def deliver(job: Deliver, tx: Tx, ctx: JobContext) -> None:
    await tx.execute("UPDATE parcels SET delivered = delivered + 1 WHERE id = ?", (job.parcel_id,))
"""


@pytest.fixture
async def sample(app_dir: AppDir, make_config: Callable[..., Config]) -> AsyncIterator[Resources]:
    app_dir.module("sample_app", SAMPLE)
    config = make_config(apps="default,sample_app")
    async with open_resources(config) as resources:
        async with resources.store.transaction() as tx:
            for parcel in ("p1", "p2", "p3"):
                await tx.execute("INSERT INTO parcels (id) VALUES (?)", (parcel,))
        yield resources


@pytest.fixture
def resources(sample: Resources) -> Resources:
    """The relay and workers of this module run the sample's deployment (the
    ``start_relay`` and ``start_worker`` fixtures take ``resources``)."""
    return sample


def _sent(parcel_id: str, poison: bool = False) -> Event:
    return EVENT_TYPES["ParcelSent"](parcel_id=parcel_id, poison=poison)  # type: ignore[call-arg]


def _delivery(event: Event, deliveries: int = 1) -> Delivery:
    fields = {"event_id": event.event_id, "type": type(event).__name__, "trace_id": "t"}
    return Delivery(Message("sluice:parcels", "1-1", fields, deliveries), event)


async def _column(resources: Resources, column: str, parcel_id: str) -> int:
    row = await resources.store.fetchone(f"SELECT {column} FROM parcels WHERE id = ?", (parcel_id,))
    return int(row[0]) if row else -1


async def test_a_once_handler_applies_an_event_once_however_often_it_is_delivered(
    sample: Resources,
) -> None:
    group = loaded_apps(sample.config).groups["stamping"](sample)
    assert (group.max_deliveries, group.retry_base_ms) == (2, 20)  # the group's own settings
    event = _sent("p1")
    assert await group.handler([_delivery(event)]) == {}
    # Redelivered (a reclaim after a crash, the relay publishing it again): acked as a
    # duplicate, no second stamp.
    again = await group.handler([_delivery(event, deliveries=2), _delivery(event, 3)])
    assert all(isinstance(outcome, Duplicate) for outcome in again.values())
    assert await _column(sample, "stamps", "p1") == 1


async def test_a_failing_once_handler_leaves_nothing_and_is_dead_lettered_by_its_group(
    sample: Resources, start_relay: Callable[..., object], start_worker: Callable[..., object]
) -> None:
    async with sample.store.transaction() as tx:
        await tx.append(_sent("p2", poison=True), _sent("p3"))
    start_relay()
    spec = loaded_apps(sample.config).groups["stamping"](sample)
    start_worker("stamping", spec=spec)

    async def dead_lettered() -> bool:
        found = await list_dead_letters(sample.redis, sample.keys, ["stamping"], 10)
        return len(found) == 1

    await wait_for(dead_lettered)
    (letter,) = await list_dead_letters(sample.redis, sample.keys, ["stamping"], 10)
    assert (letter.event_type, letter.deliveries) == ("ParcelSent", 2)  # max_deliveries=2
    assert "cannot be stamped" in letter.error
    # Its write was rolled back each time, its record too: a redrive could still apply it.
    assert await _column(sample, "stamps", "p2") == 0
    assert await _column(sample, "stamps", "p3") == 1
    handled = await sample.store.fetchall("SELECT event_id FROM handled_events")
    assert len(handled) == 1


async def test_a_delayed_job_fires_once_on_two_schedulers_and_a_cancelled_one_never(
    sample: Resources, running: Running
) -> None:
    jobs = loaded_apps(sample.config).jobs
    deliver = jobs["deliver"]
    now = utcnow()
    async with sample.store.transaction() as tx:
        payload = deliver.payload
        await deliver.schedule(tx, payload(parcel_id="p1"), key="p1", delay=timedelta(seconds=0.3))
        await deliver.schedule(tx, payload(parcel_id="p2"), key="p2", delay=timedelta(seconds=0.2))
        await deliver.schedule(tx, payload(parcel_id="p3"), key="p3", delay=timedelta(days=1))
    async with sample.store.transaction() as tx:  # moved to sooner, and cancelled
        await deliver.schedule(tx, payload(parcel_id="p3"), key="p3", delay=timedelta(seconds=0.4))
        assert await deliver.cancel(tx, "p2") is True
        assert await deliver.cancel(tx, "nothing-there") is False
    due = JobFlow.of(jobs.values(), 100, 60).due()
    for holder in ("scheduler-a", "scheduler-b"):  # two replicas racing for each job
        running.start(OneShotRunner(sample, holder=holder, poll=0.05, due=due).run(running.stop))

    async def fired() -> bool:
        rows = await sample.store.fetchall("SELECT payload FROM events WHERE type = 'JobDue'")
        return len(rows) == 2

    await wait_for(fired)
    rows = await sample.store.fetchall("SELECT payload FROM events WHERE type = 'JobDue'")
    fired_jobs = [msgspec.json.decode(bytes(row[0]), type=JobDue) for row in rows]
    assert sorted(job.key for job in fired_jobs) == ["p1", "p3"]  # p2 cancelled; once each
    assert await sample.store.fetchone("SELECT COUNT(*) FROM delayed_jobs") == (0,)
    assert all(job.scheduled_for >= now + timedelta(seconds=0.3) for job in fired_jobs)
    assert all(job.occurred_at >= job.scheduled_for for job in fired_jobs)  # not early
    # The job's group runs it once, in a transaction, like a once-handler.
    group = loaded_apps(sample.config).groups["sample-jobs"](sample)
    for job in fired_jobs:
        assert await group.handler([_delivery(job)]) == {}
        again = await group.handler([_delivery(job, 2)])
        assert all(isinstance(outcome, Duplicate) for outcome in again.values())
    delivered = [await _column(sample, "delivered", p) for p in ("p1", "p2", "p3")]
    assert delivered == [1, 0, 1]
