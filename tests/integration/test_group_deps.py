"""A group's ``deps=``, ``@group.batch`` and ``turns=`` (docs/guides/write-an-app.md,
"What a group's handlers are handed" and "A batch handler"): deps built once per worker
process and closed with it (by a worker, by the harness), a batch handler's failures
retried per event, a read's events started in turns, and a misdeclared group refused
naming the app."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from sluice.app import App, Event, HandlerContext, JobContext, Resources, Tx
from sluice.app.running import group_spec
from sluice.app.testing import open_harness
from sluice.cli.processes import _close_groups
from sluice.config import Config
from sluice.streams.messages import Delivery, Message
from tests.app_helpers import AppDir


class ParcelSent(Event, frozen=True, kw_only=True, tag="test.deps.ParcelSent"):
    aggregate: ClassVar[str] = "parcels"
    parcel_id: str
    owner: str = ""


class ParcelLost(Event, frozen=True, kw_only=True, tag="test.deps.ParcelLost"):
    aggregate: ClassVar[str] = "parcels"
    parcel_id: str


@dataclass
class Courier:
    """What the group's handlers are handed: built per process, closed at its stop."""

    carried: list[str] = field(default_factory=list)
    closed: bool = False

    async def close(self) -> None:
        self.closed = True


def _delivery(event: Event, entry: str, deliveries: int = 1) -> Delivery:
    fields = {"event_id": event.event_id, "type": type(event).__name__, "trace_id": "t"}
    return Delivery(Message("sluice:parcels", entry, fields, deliveries), event)


async def test_deps_are_built_once_per_process_handed_to_every_handler_and_closed_at_stop(
    resources: Resources,
) -> None:
    built: list[Courier] = []

    def courier(res: Resources) -> Courier:
        assert res is resources
        built.append(Courier())
        return built[-1]

    app = App("parcels")
    shipping = app.group("shipping", deps=courier)

    @shipping.on(ParcelSent)
    async def carry(event: ParcelSent, ctx: HandlerContext[Courier]) -> None:
        ctx.deps.carried.append(event.parcel_id)

    spec = group_spec(shipping, resources)
    sent = [ParcelSent(parcel_id=f"p{n}") for n in range(3)]
    assert await spec.handler([_delivery(e, f"1-{n}") for n, e in enumerate(sent)]) == {}
    assert await spec.handler([_delivery(sent[0], "1-9", deliveries=2)]) == {}
    assert len(built) == 1
    assert sorted(built[0].carried) == ["p0", "p0", "p1", "p2"]
    await _close_groups([spec])  # what a worker does as it stops
    assert built[0].closed


async def test_a_group_without_deps_hands_none(resources: Resources) -> None:
    seen: list[object] = []
    plain = App("parcels").group("plain")

    @plain.on(ParcelSent)
    async def carry(event: ParcelSent, ctx: HandlerContext) -> None:
        seen.append(ctx.deps)

    spec = group_spec(plain, resources)
    assert await spec.handler([_delivery(ParcelSent(parcel_id="p"), "1-1")]) == {}
    assert seen == [None]
    assert spec.close is None


async def test_a_dead_letter_hook_may_take_the_groups_context(resources: Resources) -> None:
    given: list[tuple[str, object]] = []

    async def lost(message: Message, error: BaseException, ctx: HandlerContext[Courier]) -> None:
        given.append((message.entry_id, ctx.deps))

    group = App("parcels").group("hooked", deps=lambda res: Courier(), on_dead_letter=lost)
    spec = group_spec(group, resources)
    assert spec.on_dead_letter is not None
    await spec.on_dead_letter(_delivery(ParcelSent(parcel_id="p"), "1-1").message, OSError())
    assert [(entry, type(deps)) for entry, deps in given] == [("1-1", Courier)]


async def test_a_batch_handler_gets_its_events_in_one_call_and_fails_only_those_it_names(
    resources: Resources,
) -> None:
    calls: list[list[str]] = []
    group = App("parcels").group("tracking", deps=lambda res: Courier())

    @group.batch(ParcelSent)
    async def track(
        events: Sequence[ParcelSent], ctx: HandlerContext[Courier]
    ) -> Mapping[str, BaseException]:
        calls.append([e.parcel_id for e in events])
        assert ctx.attempt == 2  # the read's highest attempt
        return {e.event_id: TimeoutError(e.parcel_id) for e in events if e.parcel_id == "slow"}

    fast, slow = ParcelSent(parcel_id="fast"), ParcelSent(parcel_id="slow")
    other = ParcelLost(parcel_id="x")  # on the same stream, not the group's: acked
    spec = group_spec(group, resources)
    deliveries = [_delivery(fast, "1-1"), _delivery(other, "1-2"), _delivery(slow, "1-3", 2)]
    failures = await spec.handler(deliveries)
    assert calls == [["fast", "slow"]]
    assert list(failures) == [("sluice:parcels", "1-3")]
    assert isinstance(failures[("sluice:parcels", "1-3")], TimeoutError)


async def test_the_events_of_a_read_start_in_turns_by_key(resources: Resources) -> None:
    started: list[str] = []
    group = App("parcels").group("fair", concurrency=1, turns=lambda event: event.owner)

    @group.on(ParcelSent)
    async def carry(event: ParcelSent, ctx: HandlerContext) -> None:
        started.append(event.parcel_id)
        await asyncio.sleep(0)  # the others wait for the one place

    read = [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"), ("b", "b2")]
    events = [ParcelSent(parcel_id=parcel, owner=owner) for owner, parcel in read]
    spec = group_spec(group, resources)
    assert await spec.handler([_delivery(e, f"1-{n}") for n, e in enumerate(events)]) == {}
    assert started == ["a1", "b1", "c1", "a2", "b2", "a3"]


async def _handle(events: Sequence[Event], ctx: HandlerContext) -> Mapping[str, BaseException]:
    return {}


async def _on(event: Event, ctx: HandlerContext) -> None: ...


async def _job(payload: ParcelSent, tx: Tx, ctx: JobContext) -> None: ...


def test_a_misdeclared_group_is_refused_naming_the_app() -> None:
    app = App("parcels")
    batched = app.group("batched")
    batched.batch(ParcelSent)(_handle)
    with pytest.raises(ValueError, match="app 'parcels': group 'batched' has a @batch handler"):
        batched.on(ParcelLost)
    with pytest.raises(ValueError, match="app 'parcels': group 'batched' declares @batch twice"):
        batched.batch(ParcelLost)
    with pytest.raises(ValueError, match="app 'parcels': job 'later' cannot run in group"):
        app.job("later", payload=ParcelSent, group=batched)(_job)

    mixed = app.group("mixed")
    mixed.on(ParcelSent)(_on)
    with pytest.raises(ValueError, match="app 'parcels': group 'mixed': @batch is the group's"):
        mixed.batch(ParcelLost)
    with pytest.raises(ValueError, match="app 'parcels': group 'turns': @batch is the group's"):
        app.group("turns", turns=lambda event: "").batch(ParcelLost)
    with pytest.raises(TypeError, match="app 'parcels': group 'shape', @batch\\(ParcelSent\\)"):
        app.group("shape").batch(ParcelSent)(_job)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="app 'parcels': group 'deps', deps= must be a function"):
        app.group("deps", deps="a courier")  # type: ignore[arg-type]


COURIERS = """
from typing import ClassVar

from sluice.app import App, Event, HandlerContext, Resources

app = App("couriers")
app.aggregate("couriers", key="courier_id")
# Every Courier built, in the order they were: the test reads them after the harness.
BUILT: list["Courier"] = []


class Courier:
    def __init__(self, group: str) -> None:
        self.group, self.carried, self.closed = group, [], False

    async def close(self) -> None:
        self.closed = True


@app.event
class CourierCalled(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "couriers"
    courier_id: str


def courier(resources: Resources) -> Courier:
    BUILT.append(Courier("couriers"))
    return BUILT[-1]


couriers = app.group("couriers", deps=courier)


@couriers.on(CourierCalled)
async def call(event: CourierCalled, ctx: HandlerContext[Courier]) -> None:
    ctx.deps.carried.append(event.courier_id)
"""


async def test_the_harness_runs_a_group_with_its_deps_and_closes_them_at_its_end(
    app_dir: AppDir, make_config: Callable[..., Config]
) -> None:
    app_dir.module("couriers_app", COURIERS)
    async with open_harness(make_config(apps="couriers_app")) as harness:
        module = importlib.import_module("couriers_app")
        called = module.CourierCalled
        async with harness.store.transaction() as tx:
            await tx.append(called(courier_id="c1"), called(courier_id="c2"))
        await harness.drain()
        assert len(await harness.handled("couriers")) == 2
        [built] = module.BUILT
        assert (sorted(built.carried), built.closed) == (["c1", "c2"], False)
    assert built.closed
