"""The history's size as status, the admin route, /admin and /metrics show it; and the
archive keeps hot what a group on the stream has not acked yet."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.app.assembly import all_tasks, create_app, open_resources
from sluice.builtin.links.events import LinkVisited
from sluice.cli.stream_commands import show_status
from sluice.config import Config
from sluice.embedded.redis_server import RedisServer
from sluice.history.size import measure
from sluice.http.app_keys import STORE
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from sluice.scheduler.runner import Runner
from sluice.store import Store
from tests.engine_app import APPS, Pinged
from tests.integration.archive_helpers import LONG_AGO, hot_rows, make_old, run_archive
from tests.integration.metrics_helpers import ADMIN, ADMIN_TOKEN, scrape, value

pytestmark = pytest.mark.apps(APPS)  # the engine's test app (tests/engine_app)


async def seed(store: Store) -> None:
    """Visits at seq 1-100, views at 101-130, visits at 131-200."""
    async with store.transaction() as tx:
        await tx.append(*(LinkVisited(code="c", visitor=f"x{i}") for i in range(100)))
    async with store.transaction() as tx:
        await tx.append(*(Pinged(source="a", note=f"v{i}") for i in range(30)))
    async with store.transaction() as tx:
        await tx.append(*(LinkVisited(code="c", visitor=f"y{i}") for i in range(70)))


async def test_the_size_counts_hot_and_archived_events_once(resources: Resources) -> None:
    store = resources.store
    empty = await measure(store)
    assert (empty.hot_events, empty.segments, empty.archived_events) == (0, 0, 0)
    assert empty.oldest_event_at is None and empty.head_seq == 0

    await seed(store)
    await make_old(store, 199)
    fresh = await measure(store)
    assert fresh.hot_events == 200 and fresh.segments == 0 and fresh.head_seq == 200
    assert fresh.oldest_event_at == fresh.hot_oldest_at == LONG_AGO

    # Only the visits move (views are fewer than a segment's minimum): segments of visits
    # lie above the table's first seq (the views at 101-130 stay), one straddles nothing.
    moved = await run_archive(store, segment_events=50, min_events=40, published=199)
    assert [(m.aggregate, m.first_seq, m.last_seq) for m in moved] == [
        ("visits", 1, 50),
        ("visits", 51, 100),
        ("visits", 131, 180),
    ]
    size = await measure(store)
    assert size.hot_events == len(await hot_rows(store)) == 50
    assert size.segments == 3 and size.archived_events == 150
    assert size.archived_bytes == sum(m.bytes for m in moved)
    assert size.oldest_event_at == LONG_AGO and size.head_seq == 200


async def test_a_segment_straddling_the_tables_first_seq_counts_in_proportion(
    resources: Resources,
) -> None:
    store = resources.store
    await seed(store)
    await make_old(store, 199)
    await run_archive(store, segment_events=1000, min_events=20, published=199)
    # The views (101-130) and the visits (1-100, 131-199) are archived: the newest visit
    # stays as the head.
    size = await measure(store)
    assert size.hot_events == len(await hot_rows(store)) == 1
    assert size.archived_events == 199 and size.head_seq == 200


async def test_status_the_admin_route_and_metrics_show_the_size(
    aiohttp_client: Callable[..., Awaitable[Any]],
    make_config: Callable[..., Config],
    redis_server: RedisServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = make_config(admin_token=ADMIN_TOKEN)
    client = await aiohttp_client(create_app(config))
    store = client.server.app[STORE]
    await seed(store)
    await make_old(store, 199)
    moved = await run_archive(store, segment_events=50, min_events=40, published=199)

    assert (await client.get("/v1/admin/archive")).status == 401
    answer = await client.get("/v1/admin/archive", headers=ADMIN)
    assert answer.status == 200
    shown = await answer.json()
    assert shown == {
        "hot_events": 50,
        "hot_oldest_at": LONG_AGO,
        "segments": 3,
        "archived_events": 150,
        "archived_bytes": sum(m.bytes for m in moved),
        "oldest_event_at": LONG_AGO,
        "head_seq": 200,
    }

    metrics = await scrape(client)
    assert value(metrics, "sluice_history_hot_events") == 50
    assert value(metrics, "sluice_history_segments") == 3
    assert value(metrics, "sluice_history_archived_events") == 150
    assert value(metrics, "sluice_history_archived_bytes") == shown["archived_bytes"]
    oldest = datetime.fromisoformat(LONG_AGO).timestamp()
    assert value(metrics, "sluice_history_oldest_event_timestamp_seconds") == oldest

    assert await show_status(config, as_json=True) == 0
    out = capsys.readouterr().out  # log lines too: the report is the JSON object
    report, _ = json.JSONDecoder().raw_decode(out[out.index("{\n") :])
    assert report["history"] == shown
    assert await show_status(config, as_json=False) == 0
    assert "history: 50 hot events (oldest 2026-01-01T00:00:00+00:00), 150 archived in 3" in (
        capsys.readouterr().out
    )

    redis_server.stop()  # the size comes from the database alone
    assert (await client.get("/v1/admin/archive", headers=ADMIN)).status == 200
    assert value(await scrape(client), "sluice_history_segments") == 3


async def test_events_a_group_has_not_acked_stay_hot_whatever_their_age(
    make_config: Callable[..., Config],
) -> None:
    async with open_resources(make_config(history_segment_events=1_000)) as resources:
        await _a_stalled_group_keeps_its_events_hot(resources)


async def _a_stalled_group_keeps_its_events_hot(resources: Resources) -> None:
    store, redis, keys = resources.store, resources.redis, resources.keys
    for start in range(0, 3_000, 1_000):
        async with store.transaction() as tx:
            await tx.append(
                *(LinkVisited(code="c", visitor=f"x{i}") for i in range(start, start + 1_000))
            )
    await make_old(store, 3_000)
    await store.set_position(POSITION, 3_000)
    # The stream as the relay left it; link-stats took 2,500 entries and acked the first
    # 1,200, the rest are pending on a consumer that stalled.
    stream = keys.stream("visits")
    for seq in range(1, 3_001):
        await redis.xadd(stream, {b"seq": str(seq)})
    await redis.xgroup_create(stream, "link-stats", id="0")
    await redis.xgroup_create(stream, "exports", id="$")
    taken = await redis.xreadgroup("link-stats", "stalled", {stream: ">"}, count=2_500)
    ids = [entry_id for entry_id, _ in taken[0][1]]
    await redis.xack(stream, "link-stats", *ids[:1_200])

    task = all_tasks(resources.config)["archive-history"]
    runner = Runner(resources, holder="a")
    record = await runner.execute(await runner.begin(task, "manual", datetime.now(UTC)))

    assert record.status == "succeeded"
    hot = [r[0] for r in await hot_rows(store) if r[2] == "LinkVisited"]
    assert hot[0] == 1_201 and hot[-1] == 3_000
    assert (await measure(store)).archived_events == 1_200
