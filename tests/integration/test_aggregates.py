"""Event-sourced aggregates (docs/concepts/aggregates.md): fold, optimistic concurrency,
snapshots, on both stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import msgspec
import pytest

from sluice.app import (
    Aggregate,
    App,
    Conflict,
    HandlerContext,
    HandlerError,
    NotFound,
    Tx,
    VersionConflict,
    applies,
    retry_on_conflict,
    save_all,
    store,
)
from sluice.app.assembly import create_app
from sluice.app.running import group_spec
from sluice.app.testing import sluice_command, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.store import Store
from tests.api.helpers import AiohttpClient
from tests.engine_app import APPS, PingAnswered, Pinged, registered
from tests.integration.aggregate_helpers import Pings, SnappedPings
from tests.integration.archive_helpers import all_made_old, run_archive

pytestmark = pytest.mark.apps(APPS)


class SnappedPingsV2(SnappedPings):
    state_version: ClassVar[int] = 2


P = TypeVar("P", bound=Pings)


@pytest.fixture(autouse=True)
def _events() -> None:
    registered()


def pinged(aggregate: P, count: int) -> P:
    """``aggregate`` with ``count`` more pings recorded, noted "0", "1", ..."""
    for n in range(count):
        aggregate.ping(str(n))
    return aggregate


async def saved(store: Store, aggregate: Aggregate) -> None:
    async with store.transaction() as tx:
        await aggregate.save(tx)


async def events_of(store: Store, source: str) -> list[Pinged]:
    """The pings of ``source`` in the history, oldest first."""
    rows = await store.fetchall("SELECT payload FROM events WHERE type = 'Pinged' ORDER BY seq")
    pings = [msgspec.json.decode(bytes(payload), type=Pinged) for (payload,) in rows]
    return [p for p in pings if p.source == source]


async def history_count(store: Store, source: str, kind: str) -> int:
    rows = await store.fetchall("SELECT payload FROM events WHERE type = ?", (kind,))
    return sum(1 for (payload,) in rows if f'"source":"{source}"' in bytes(payload).decode())


async def test_saved_events_fold_back_into_the_same_state(store: Store) -> None:
    pings = Pings("a")
    pings.ping("one")
    pings.ping("two")
    assert (pings.version, pings.count, pings.notes) == (2, 2, ["one", "two"])
    await saved(store, pings)
    assert pings.pending == ()

    loaded = await Pings.load(store, "a")
    assert loaded.state() == {"count": 2, "notes": ["one", "two"], "answered": 0}
    assert loaded.version == 2
    assert await history_count(store, "a", "Pinged") == 2
    # A new aggregate's mutable default is its own.
    assert Pings("b").notes == []


async def test_an_unknown_id_is_not_found_rather_than_empty(store: Store) -> None:
    assert await Pings.find(store, "nobody") is None
    with pytest.raises(NotFound):
        await Pings.load(store, "nobody")


async def test_of_concurrent_saves_of_one_version_exactly_one_commits(store: Store) -> None:
    first = Pings("hot")
    first.ping("placed")
    await saved(store, first)
    loaded = [await Pings.load(store, "hot") for _ in range(20)]
    assert {p.version for p in loaded} == {1}

    async def answer(pings: Pings) -> str:
        try:
            async with store.transaction() as tx:
                pings.answer_once()
                await pings.save(tx)
        except VersionConflict:
            return "conflict"
        return "saved"

    outcomes = await asyncio.gather(*(answer(p) for p in loaded))
    assert sorted(outcomes) == ["conflict"] * 19 + ["saved"]
    assert await history_count(store, "hot", "PingAnswered") == 1
    assert (await Pings.load(store, "hot")).version == 2


async def test_a_swallowed_conflict_commits_nothing_of_the_aggregate(store: Store) -> None:
    base = Pings("s")
    base.ping("0")
    await saved(store, base)
    stale, fresh = await Pings.load(store, "s"), await Pings.load(store, "s")
    fresh.ping("fresh")
    await saved(store, fresh)
    stale.ping("stale-1")
    stale.ping("stale-2")  # version 3 is free: only 2 clashes
    async with store.transaction() as tx:
        with pytest.raises(VersionConflict):
            await stale.save(tx)
    # The transaction committed (the caller swallowed the conflict): nothing of it did.
    again = await Pings.load(store, "s")
    assert (again.version, again.notes) == (2, ["0", "fresh"])
    assert await history_count(store, "s", "Pinged") == 2


async def test_save_all_saves_many_in_one_go_or_none_of_them(store: Store) -> None:
    many = [pinged(Pings(f"m{n}"), 2) for n in range(50)]
    async with store.transaction() as tx:
        await save_all(tx, *many)
    assert [(await Pings.load(store, f"m{n}")).version for n in (0, 49)] == [2, 2]
    assert all(p.pending == () for p in many)

    stale = await Pings.load(store, "m7")
    moved = await Pings.load(store, "m7")
    await saved(store, pinged(moved, 1))
    batch = [pinged(Pings(f"n{n}"), 1) for n in range(20)] + [pinged(stale, 1)]
    async with store.transaction() as tx:  # the caller swallows the conflict and commits
        with pytest.raises(VersionConflict, match="m7 moved on from version 2"):
            await save_all(tx, *batch)
    assert await Pings.find(store, "n0") is None  # nothing of the batch was written
    assert (await Pings.load(store, "m7")).version == 3


async def test_retry_on_conflict_decides_again_on_the_new_state(store: Store) -> None:
    base = Pings("r")
    base.ping("0")
    await saved(store, base)
    calls = 0

    # SQLite runs one write transaction at a time: the other writer's transaction would
    # wait for ours, so it writes through a load made before ours begins.
    stale = await Pings.load(store, "r")
    other = await Pings.load(store, "r")
    other.ping("other")
    await saved(store, other)

    async def with_stale_first(tx: Tx) -> int:
        nonlocal calls
        calls += 1
        pings = stale if calls == 1 else await Pings.load(tx, "r")
        pings.ping(f"attempt {calls}")
        await pings.save(tx)
        return pings.version

    assert await retry_on_conflict(store, with_stale_first) == 3
    assert calls == 2
    assert (await Pings.load(store, "r")).notes == ["0", "other", "attempt 2"]


async def test_a_commands_own_conflict_is_not_retried(store: Store) -> None:
    base = Pings("c")
    base.ping("0")
    base.answer_once()
    await saved(store, base)
    calls = 0

    async def answer(tx: Tx) -> None:
        nonlocal calls
        calls += 1
        pings = await Pings.load(tx, "c")
        pings.answer_once()
        await pings.save(tx)

    with pytest.raises(Conflict) as raised:
        await retry_on_conflict(store, answer)
    assert not isinstance(raised.value, VersionConflict)
    assert calls == 1


async def test_snapshot_and_tail_equal_the_full_fold_at_every_boundary(store: Store) -> None:
    pings = SnappedPings("snap")
    for n in range(1, 22):
        pings.ping(str(n))
        if n % 3 == 0 or n in (5, 10, 11, 15, 20):
            await saved(store, pings)
            snapped = await SnappedPings.load(store, "snap")
            folded = await Pings.load(store, "snap")  # no snapshots: every event
            assert snapped.state() == folded.state() == pings.state()
            assert snapped.version == folded.version == n
    row = await store.fetchone(
        "SELECT version FROM aggregate_snapshots WHERE aggregate_id = ?", ("snap",)
    )
    assert row is not None and int(row[0]) == 20  # the save that crossed 20

    async with store.transaction() as tx:
        await tx.execute("DELETE FROM aggregate_snapshots")
    assert (await SnappedPings.load(store, "snap")).state() == pings.state()


async def test_a_snapshot_of_another_state_version_is_set_aside_and_rebuilt(
    store: Store,
) -> None:
    pings = pinged(SnappedPings("v"), 6)
    await saved(store, pings)
    # Forge the snapshot: were it trusted, the state would show it.
    async with store.transaction() as tx:
        await tx.execute("UPDATE aggregate_snapshots SET state = ?", (b'{"count":999}',))
    assert (await SnappedPings.load(store, "v")).count == 999  # same class: trusted
    newer = await SnappedPingsV2.load(store, "v")
    assert newer.count == 6  # another state version: folded from the events
    newer.ping("6")
    async with store.transaction() as tx:
        await newer.save(tx)  # and the next save replaces the snapshot
    row = await store.fetchone("SELECT version, state_version FROM aggregate_snapshots")
    assert row is not None and (int(row[0]), int(row[1])) == (7, 2)
    assert (await SnappedPingsV2.load(store, "v")).count == 7


async def test_a_snapshot_of_another_class_of_the_aggregate_type_is_not_trusted(
    store: Store,
) -> None:
    class Counted(Aggregate):  # the same events and state version as SnappedPings
        aggregate: ClassVar[str] = "pings"
        snapshot_every: ClassVar[int] = 5
        count: int = 0

        @applies(Pinged)
        def _pinged(self, event: Pinged) -> None:
            self.count += 1

        @applies(PingAnswered)
        def _answered(self, event: PingAnswered) -> None:
            pass

    counted = Counted("shared")
    for _ in range(6):
        counted.record(Pinged(source="shared"))
    await saved(store, counted)  # its snapshot at 6: {"count": 6}, no notes
    pings = await SnappedPings.load(store, "shared")
    assert (pings.count, pings.notes) == (6, [""] * 6)  # folded, not the other's snapshot


async def test_a_snapshot_that_no_longer_decodes_is_set_aside(store: Store) -> None:
    await saved(store, pinged(SnappedPings("d"), 6))
    async with store.transaction() as tx:  # a field of another type than the class's
        await tx.execute("UPDATE aggregate_snapshots SET state = ?", (b'{"count":"six"}',))
    loaded = await SnappedPings.load(store, "d")
    assert (loaded.count, loaded.version) == (6, 6)


async def test_mistakes_are_refused_before_anything_is_written(store: Store) -> None:
    pings = Pings("mine")
    with pytest.raises(ValueError, match="source is 'theirs'"):
        pings.record(Pinged(source="theirs"))
    assert pings.version == 0 and pings.pending == ()
    with pytest.raises(TypeError, match="aggregate 'orders'"):

        class Wrong(Aggregate):
            aggregate: ClassVar[str] = "orders"

            @applies(Pinged)
            def _pinged(self, event: Pinged) -> None: ...

    class Partial(Aggregate):
        aggregate: ClassVar[str] = "pings"

        @applies(Pinged)
        def _pinged(self, event: Pinged) -> None: ...

    with pytest.raises(TypeError, match="no @applies\\(PingAnswered\\)"):
        Partial("x").record(PingAnswered(source="x", ping_id="p"))


async def test_the_archive_keeps_an_event_sourced_aggregate_type_in_the_table(
    store: Store,
) -> None:
    pings = pinged(Pings("kept"), 30)
    async with store.transaction() as tx:
        await pings.save(tx)
        await tx.append(*(LinkVisited(code="c", visitor=f"x{i}") for i in range(30)))
    head = await all_made_old(store)

    moved = await run_archive(store, segment_events=100, min_events=1, published=head)

    assert [(m.aggregate, m.events) for m in moved] == [("visits", 30)]
    loaded = await Pings.load(store, "kept")
    assert (loaded.version, loaded.notes) == (30, [str(n) for n in range(30)])


async def test_sluice_events_shows_one_aggregates_events_in_version_order(
    config: Config, store: Store
) -> None:
    await saved(store, pinged(Pings("one"), 2))
    await saved(store, pinged(Pings("other"), 1))
    async with store.transaction() as tx:
        await tx.append(Pinged(source="one", note="appended, not saved"))
    answered = Pings("one")
    answered.version = answered._saved = 2
    answered.answer_once()
    await saved(store, answered)

    done = await sluice_command(config, "events", "--aggregate", "pings:one")
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert [(line[0], line[3]) for line in lines] == [
        ("v1", "Pinged"),
        ("v2", "Pinged"),
        ("v3", "PingAnswered"),
    ]
    done = await sluice_command(config, "events", "--aggregate", "pings:one", "--json")
    items = msgspec.json.decode(done.stdout)["items"]
    assert [(i["version"], i["data"].get("note")) for i in items] == [(1, "0"), (2, "1"), (3, None)]

    refused = await sluice_command(config, "events", "--aggregate", "nope:1")
    assert refused.returncode == 2 and "is not an aggregate" in refused.stderr


class LongPings(Pings):
    snapshot_every: ClassVar[int] = 1000


async def test_a_ten_thousand_event_aggregate_loads_the_same_with_and_without_snapshots(
    store: Store,
) -> None:
    pings = LongPings("long")
    for _ in range(10):  # ten saves of a thousand: each crosses an interval
        pinged(pings, 1000)
        await saved(store, pings)
    from_snapshot = await LongPings.load(store, "long")
    folded = await Pings.load(store, "long")  # every event
    assert from_snapshot.version == folded.version == 10_000
    assert from_snapshot.state() == folded.state() == pings.state()
    assert folded.count == 10_000 and folded.notes[-1] == "999"


async def test_the_admin_event_shows_its_aggregate_version_and_snapshot(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    token = "aggregates-admin-token-0123456789abcdef"
    client = await aiohttp_client(create_app(make_config(admin_token=token)))
    assert client.app is not None
    db = store(client.app)
    pings = pinged(SnappedPings("shown"), 7)  # a snapshot at 7
    await saved(db, pings)
    shown = await events_of(db, "shown")
    first, seventh = shown[0].event_id, shown[6].event_id
    await saved(db, pinged(pings, 1))
    headers = {"Authorization": f"Bearer {token}"}

    async def story(event_id: str) -> dict[str, Any]:
        response = await client.get(f"/v1/admin/events/{event_id}", headers=headers)
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body

    assert (await story(first))["saved"] == {
        "aggregate_id": "shown",
        "version": 1,
        "latest": 8,
        "snapshot_version": 7,
        "snapshot_state_version": 1,
    }
    assert (await story(seventh))["saved"]["version"] == 7
    async with db.transaction() as tx:
        await tx.append(Pinged(source="shown", note="appended"))
    (appended,) = [e for e in await events_of(db, "shown") if e.note == "appended"]
    assert (await story(appended.event_id))["saved"] is None


class Answers(Aggregate):
    """The answers given to one source's pings."""

    aggregate: ClassVar[str] = "pings"
    snapshot_every: ClassVar[int] = 0
    answered: list[str] = []  # noqa: RUF012 (copied for each aggregate)

    @applies(PingAnswered)
    def _answered(self, event: PingAnswered) -> None:
        self.answered.append(event.ping_id)

    def answer(self, ping_id: str) -> None:
        self.record(PingAnswered(source=self.id, ping_id=ping_id))


@pytest.mark.topologies("single", "cluster")
async def test_a_once_handler_that_saves_an_aggregate_saves_each_event_once(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., Consumer]
) -> None:
    group = App("aggregates-once").group("answers", retry_base_ms=10)
    failed: set[str] = set()

    @group.once(Pinged)
    async def answer(event: Pinged, tx: Tx, ctx: HandlerContext) -> None:
        answers = await Answers.find(tx, event.source) or Answers(event.source)
        answers.answer(event.event_id)
        await answers.save(tx)
        if event.note.startswith("flaky") and event.event_id not in failed:
            failed.add(event.event_id)  # after the save, before the commit: undone, retried
            raise HandlerError("the mailbox was full")

    notes = ["a", "flaky-b", "c", "flaky-d", "e"]
    pings = [Pinged(source="answered", note=note) for note in notes]
    for ping in pings:  # a transaction each: the group takes them in order
        async with resources.store.transaction() as tx:
            await tx.append(ping)
    start_relay()
    start_worker(spec=group_spec(group, resources))

    async def all_handled() -> bool:
        row = await resources.store.fetchone(
            "SELECT COUNT(*) FROM handled_events WHERE group_name = 'answers'"
        )
        return row is not None and int(row[0]) == len(pings)

    await wait_for(all_handled)
    assert len(failed) == 2
    answers = await Answers.load(resources.store, "answered")
    assert sorted(answers.answered) == sorted(p.event_id for p in pings)  # each once
    assert answers.version == len(pings)
    assert await history_count(resources.store, "answered", "PingAnswered") == len(pings)
