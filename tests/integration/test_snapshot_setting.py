"""SLUICE_SNAPSHOT_EVERY (docs/concepts/aggregates.md, "Snapshots"): a deployment's
interval per aggregate type, over the class's, on both stores; a value that cannot be
used stops the process naming the variable."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from sluice.app.assembly import assemble, open_store
from sluice.app.testing import sluice_command
from sluice.config import Config
from sluice.errors import ConfigError
from sluice.store import Store
from tests.engine_app import APPS, registered
from tests.integration.aggregate_helpers import Pings, SnappedPings

pytestmark = pytest.mark.apps(APPS)


@pytest.fixture(autouse=True)
def _events() -> None:
    registered()


@pytest.fixture
async def opened(
    make_config: Callable[..., Config],
) -> AsyncIterator[Callable[[str], Awaitable[Store]]]:
    """``await opened(snapshot_every)``: the test's store, opened with that setting."""
    stores: list[Store] = []

    async def open_with(snapshot_every: str) -> Store:
        store = await open_store(make_config(snapshot_every=snapshot_every))
        stores.append(store)
        return store

    yield open_with
    for store in stores:
        await store.close()


async def snapshot_versions(store: Store, aggregate: type[Pings], source: str, n: int) -> list[int]:
    """Ping ``source`` ``n`` times, one save each (loaded again before each), and the
    version of its snapshot after each save (0: none yet)."""
    seen = []
    for _ in range(n):
        async with store.transaction() as tx:
            pings = await aggregate.find(tx, source) or aggregate(source)
            pings.ping("x")
            await pings.save(tx)
        row = await store.fetchone(
            "SELECT version FROM aggregate_snapshots WHERE aggregate_id = ?", (source,)
        )
        seen.append(0 if row is None else int(row[0]))
    return seen


async def test_the_deployments_interval_replaces_the_classes(
    opened: Callable[[str], Awaitable[Store]],
) -> None:
    store = await opened("pings=3")
    assert SnappedPings.snapshot_every == 5
    assert await snapshot_versions(store, SnappedPings, "three", 7) == [0, 0, 3, 3, 3, 6, 6]
    # The class says none; the deployment turns them on.
    assert await snapshot_versions(store, Pings, "off-in-class", 4) == [0, 0, 3, 3]
    loaded = await SnappedPings.load(store, "three")
    assert (loaded.version, loaded.count) == (7, 7)


async def test_zero_takes_no_snapshot(opened: Callable[[str], Awaitable[Store]]) -> None:
    store = await opened("pings=0")
    assert await snapshot_versions(store, SnappedPings, "none", 11) == [0] * 11
    assert (await SnappedPings.load(store, "none")).count == 11


async def test_without_the_setting_the_class_decides(
    opened: Callable[[str], Awaitable[Store]],
) -> None:
    store = await opened("")
    assert await snapshot_versions(store, SnappedPings, "class", 6) == [0, 0, 0, 0, 5, 5]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("pings=every", "must be comma-separated TYPE=EVENTS"),
        ("pings=-1", "must be comma-separated TYPE=EVENTS"),
        ("pings=2,pings=3", "must be comma-separated TYPE=EVENTS"),
        ("pings=2,carts=0", "names 'carts', which no loaded app declares"),
    ],
)
def test_a_value_that_cannot_be_used_is_refused_naming_the_variable(
    make_config: Callable[..., Config], value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=f"SLUICE_SNAPSHOT_EVERY.*{message}"):
        assemble(make_config(snapshot_every=value))


async def test_a_process_with_an_undeclared_type_does_not_start(config: Config) -> None:
    done = await sluice_command(config, "migrate", SLUICE_SNAPSHOT_EVERY="carts=10")
    assert done.returncode != 0
    assert "SLUICE_SNAPSHOT_EVERY names 'carts'" in done.stderr
