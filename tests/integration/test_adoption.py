"""Adopting a history (docs/concepts/aggregates.md, "Adopting an existing history"):
events appended before an Aggregate class existed get their versions, once, on both
stores; the archive's events are refused, not half-adopted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import sluice.app.adoption as adopting
from sluice.app import AdoptionRefused, adopt_history
from sluice.app.testing import sluice_command
from sluice.config import Config
from sluice.events import utcnow
from sluice.history.archive import ArchiveError, _move, _next_rows, limits
from sluice.store import Store
from tests.engine_app import APPS, Pinged, registered
from tests.integration.aggregate_helpers import Pings
from tests.integration.archive_helpers import all_made_old, run_archive

pytestmark = pytest.mark.apps(APPS)


@pytest.fixture(autouse=True)
def _events() -> None:
    registered()


async def appended(store: Store, *sources: str) -> None:
    """One plain ``Pinged`` per source, in order, as an app without an aggregate wrote
    them (noted by their position)."""
    async with store.transaction() as tx:
        await tx.append(*(Pinged(source=s, note=str(n)) for n, s in enumerate(sources)))


async def versions(store: Store, source: str) -> list[int]:
    rows = await store.fetchall(
        "SELECT version FROM aggregate_events WHERE aggregate = 'pings' AND aggregate_id = ?"
        " ORDER BY version",
        (source,),
    )
    return [int(v) for (v,) in rows]


async def test_an_adopted_history_loads_and_saves_on_from_its_last_version(store: Store) -> None:
    await appended(store, "a", "b", "a")
    await appended(store, "a", "b")
    assert await Pings.find(store, "a") is None  # before: the class sees nothing

    adoption = await adopt_history(store, "pings")

    assert (adoption.ids, adoption.events, adoption.left_events) == (2, 5, 0)
    assert adoption.lines() == ["pings: adopted 2 ids, 5 events given versions"]
    a = await Pings.load(store, "a")
    assert (a.version, a.notes) == (3, ["0", "2", "0"])
    assert (await Pings.load(store, "b")).notes == ["1", "1"]
    async with store.transaction() as tx:
        a = await Pings.load(tx, "a")
        a.ping("saved")
        await a.save(tx)
    assert await versions(store, "a") == [1, 2, 3, 4]
    assert (await Pings.load(store, "a")).notes == ["0", "2", "0", "saved"]

    again = await adopt_history(store, "pings")
    assert (again.ids, again.events) == (0, 0)
    assert again.lines() == ["pings: nothing to adopt (every id with events already has versions)"]


async def test_ids_with_versions_are_left_alone_and_their_stray_events_reported(
    store: Store,
) -> None:
    saved = Pings("saved")
    saved.ping("by the aggregate")
    async with store.transaction() as tx:
        await saved.save(tx)
    await appended(store, "saved", "new", "saved")

    adoption = await adopt_history(store, "pings")

    assert (adoption.ids, adoption.events) == (1, 1)  # "new" only
    assert (adoption.left_ids, adoption.left_events, adoption.examples) == (1, 2, ("saved",))
    assert adoption.lines()[1] == (
        "pings: 2 events of 1 ids that already have versions have none themselves,"
        " left as they are (saved)"
    )
    assert await versions(store, "saved") == [1]
    assert (await Pings.load(store, "saved")).notes == ["by the aggregate"]


async def test_a_history_the_archive_holds_part_of_is_refused(store: Store) -> None:
    await appended(store, *(["old"] * 30))
    head = await all_made_old(store)
    moved = await run_archive(store, segment_events=100, min_events=1, published=head)
    assert [(m.aggregate, m.events) for m in moved] == [("pings", 30)]
    await appended(store, "young")

    with pytest.raises(AdoptionRefused, match="the archive holds 30 events of pings"):
        await adopt_history(store, "pings")
    assert await store.fetchall("SELECT * FROM aggregate_events") == []


async def test_the_archive_moves_nothing_of_a_type_adopted_under_its_feet(store: Store) -> None:
    await appended(store, *(["old"] * 10))
    head = await all_made_old(store)
    run = await limits(store, utcnow(), 7, head, segment_events=100, min_events=1)
    rows = await _next_rows(store, "pings", run)  # the archive has read them...
    assert rows is not None and len(rows) == 10
    await adopt_history(store, "pings")  # ...when the adoption commits

    with pytest.raises(ArchiveError, match="became event-sourced"):
        await _move(store, rows)
    assert (await Pings.load(store, "old")).version == 10


async def test_sluice_aggregates_adopt_says_what_it_did(config: Config, store: Store) -> None:
    await appended(store, "x", "y", "x")

    done = await sluice_command(config, "aggregates", "adopt", "pings")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "pings: adopted 2 ids, 3 events given versions\n"
    done = await sluice_command(config, "aggregates", "adopt", "pings")
    assert "nothing to adopt" in done.stdout
    refused = await sluice_command(config, "aggregates", "adopt", "nopes")
    assert refused.returncode == 1
    assert "'nopes' is not an aggregate type; known: " in refused.stderr


async def test_an_aggregate_saved_during_an_adoption_stops_it_and_a_rerun_finishes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await appended(store, "a", "b")
    insert = adopting._insert

    async def saved_first(db: Store, aggregate: str, rows: Sequence[Any]) -> None:
        live = Pings("b")  # the new code saves "b" between the adoption's read and write
        live.ping("live")
        async with store.transaction() as tx:
            await live.save(tx)
        await insert(db, aggregate, rows)

    monkeypatch.setattr(adopting, "_insert", saved_first)
    with pytest.raises(AdoptionRefused, match="was saved while its history was being adopted"):
        await adopt_history(store, "pings")
    monkeypatch.setattr(adopting, "_insert", insert)
    assert await versions(store, "a") == []  # the chunk rolled back whole

    again = await adopt_history(store, "pings")
    assert (again.ids, again.events, again.left_events, again.examples) == (1, 1, 1, ("b",))
    assert (await Pings.load(store, "a")).notes == ["0"]
