"""Readers see one history, archived or hot: a replay after archiving gives the live
numbers, an export of visits spanning segments and the table lists each visit once, and
a damaged segment stops both with ``CorruptSegment`` naming it."""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Callable

import msgspec
import pytest

from sluice.app.assembly import loaded_apps
from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.exports import jobs, visits
from sluice.builtin.links.exports.runner import ExportDeps, run_export
from sluice.consumers.consumer import Consumer
from sluice.history import CorruptSegment, catalog
from sluice.history.packed import Packed, read_history_packed
from sluice.history.reader import read_history
from sluice.process.resources import Resources
from sluice.projections.replay import rebuild
from sluice.relay.relay import POSITION, Relay
from sluice.store import Store
from sluice.store.base import Row
from tests.engine_app import APPS, Pinged
from tests.integration.archive_helpers import make_old, run_archive
from tests.link_helpers import OWNER, add_link, add_user

pytestmark = pytest.mark.apps(APPS)  # the engine's test app (tests/engine_app)

# Projection tables compared after a replay (processed-id tables and times left out).
SNAPSHOT = (
    "SELECT code, total, bots, unique_visitors FROM link_stats ORDER BY code",
    "SELECT * FROM link_stats_days ORDER BY code, day",
    "SELECT * FROM link_stats_referrers ORDER BY code, referrer",
    "SELECT * FROM link_stats_browsers ORDER BY code, browser",
    "SELECT * FROM link_visitors ORDER BY code, visitor",
    "SELECT * FROM link_day_visitors ORDER BY code, day, visitor",
    "SELECT * FROM engine_ping_counts ORDER BY source",
)
BROWSERS = ("Chrome", "Firefox", "Googlebot")


def visit(i: int, code: str | None = None) -> LinkVisited:
    return LinkVisited(
        code=code or f"c{i % 3}",
        visitor=f"x{i % 17}",
        browser=BROWSERS[i % 3],
        referrer_host=(None, "t.co", "news.example.com")[i % 3],
        is_bot=i % 3 == 2,
    )


async def traffic(store: Store, rounds: range) -> None:
    """Per round, 100 visits then 30 pings, each in a transaction: aggregates interleave."""
    for r in rounds:
        async with store.transaction() as tx:
            await tx.append(*(visit(i) for i in range(r * 100, r * 100 + 100)))
        async with store.transaction() as tx:
            await tx.append(
                *(Pinged(source=f"a{i % 4}", note=f"v{i}") for i in range(r * 30, r * 30 + 30))
            )


async def snapshot(store: Store) -> list[list[Row]]:
    return [await store.fetchall(sql) for sql in SNAPSHOT]


async def counted(store: Store, visits_: int, pings: int) -> None:
    async def caught_up() -> bool:
        v = await store.fetchone("SELECT COALESCE(SUM(total), 0) FROM link_stats")
        p = await store.fetchone("SELECT COALESCE(SUM(pings), 0) FROM engine_ping_counts")
        return v is not None and p is not None and (int(v[0]), int(p[0])) == (visits_, pings)

    await wait_for(caught_up)


async def test_replay_after_archiving_gives_the_live_numbers(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., Consumer]
) -> None:
    store = resources.store
    start_relay()
    start_worker("ping-counts")
    start_worker("link-stats", name="w2")
    await traffic(store, range(6))
    await counted(store, 600, 180)
    await make_old(store, await store.max_seq())
    moved = await run_archive(store, segment_events=70)
    assert {m.aggregate for m in moved} == {"visits", "pings"}
    assert sum(m.events for m in moved) == 779  # all but the head
    await traffic(store, range(6, 8))  # hot, after the archived ones
    await counted(store, 800, 240)
    live = await snapshot(store)

    for name, events in (("link-stats", 800), ("ping-counts", 240)):
        projection = loaded_apps(resources.config).projections[name]
        result = await rebuild(resources, projection, chunk=64, tail=16, progress=False)
        assert result.events == events
        assert result.watermark == await store.max_seq()
    assert await snapshot(store) == live


async def test_the_history_reader_gives_archived_and_hot_rows_once_in_seq_order(
    resources: Resources,
) -> None:
    store = resources.store
    await traffic(store, range(5))
    everything = await store.events_after(0, 10_000)
    await make_old(store, everything[-1].seq)
    await store.set_position(POSITION, everything[-1].seq)
    await run_archive(store, segment_events=45)
    # Both aggregates' types at once: segments interleave with each other and the table.
    types = ("LinkVisited", "Pinged")
    read = [row async for chunk in read_history(store, types, chunk=33) for row in chunk]
    assert read == [(e.seq, e.payload) for e in everything]
    middle = everything[300].seq
    read = [
        row async for chunk in read_history(store, types, middle, upto=middle + 90) for row in chunk
    ]
    assert read == [(e.seq, e.payload) for e in everything if middle < e.seq <= middle + 90]


async def test_the_packed_reader_gives_every_event_once_while_an_archive_run_moves_rows(
    resources: Resources,
) -> None:
    store = resources.store
    await traffic(store, range(6))
    everything = await store.events_after(0, 10_000)
    pings = [e for e in everything if e.type == "Pinged"]
    await make_old(store, everything[-1].seq)
    await store.set_position(POSITION, everything[200].seq)
    assert await run_archive(store, segment_events=25)  # the oldest first, pings among them

    def payloads(chunk: Packed) -> list[dict[str, object]]:
        return sorted(msgspec.json.decode(chunk.payloads), key=str)  # type: ignore[no-any-return]

    chunks: list[Packed] = []
    reader = read_history_packed(store, ("Pinged",), chunk=20, short=20)
    async for chunk in reader:
        chunks.append(chunk)
        if len(chunks) == 2:  # mid-read, an archive run takes the rest of the table
            await store.set_position(POSITION, everything[-1].seq)
            assert await run_archive(store, segment_events=25)
    read = [p for chunk in chunks for p in payloads(chunk)]
    assert len(read) == len(pings) == sum(c.count for c in chunks)
    assert sorted(read, key=str) == sorted((msgspec.json.decode(e.payload) for e in pings), key=str)
    # Chunks follow each other in seq order without a gap or an overlap.
    assert [c.after for c in chunks[1:]] == [c.last for c in chunks[:-1]]
    assert chunks[-1].last == pings[-1].seq


async def test_an_export_of_visits_spanning_segments_and_the_table_lists_each_once(
    resources: Resources,
) -> None:
    store = resources.store
    await add_link(store, "big", "https://example.org/big")
    await add_user(store)
    expected: list[str] = []
    for r in range(8):
        async with store.transaction() as tx:
            batch = [visit(i, "big" if i % 4 else "other") for i in range(r * 100, r * 100 + 100)]
            await tx.append(*batch)
            expected += [v.visitor for v in batch if v.code == "big"]
    head = await store.max_seq()
    await make_old(store, head)
    await store.set_position(POSITION, head - 250)  # the last 250 visits stay hot
    moved = await run_archive(store, segment_events=120)
    assert len(moved) > 3
    job, _ = await jobs.request_export(store, OWNER, "big", "trace-export")
    # Windows of 50 seq numbers: most start inside a segment, some cross into the table.
    await run_export(job.id, dataclasses.replace(ExportDeps.from_resources(resources), batch=50))

    finished = await jobs.get_job(store, job.id)
    assert finished is not None and finished.status == "succeeded"
    assert finished.rows == len(expected) == 600
    chunks = await store.fetchall(
        "SELECT data FROM export_chunks WHERE job_id = ? ORDER BY first_byte", (job.id,)
    )
    text = b"".join(bytes(c[0]) for c in chunks).decode()
    _, *rows = csv.reader(io.StringIO(text, newline=""))
    assert [row[1] for row in rows] == expected


async def test_a_corrupt_segment_stops_replay_and_export_naming_it(resources: Resources) -> None:
    store = resources.store
    await traffic(store, range(3))
    head = await store.max_seq()
    await make_old(store, head)
    await store.set_position(POSITION, head)
    await run_archive(store, segment_events=1000)
    damaged = next(s for s in await catalog.segments(store) if s.aggregate == "visits")
    row = await store.fetchone("SELECT data FROM history_segments WHERE id = ?", (damaged.id,))
    assert row is not None
    data = bytearray(row[0])
    data[len(data) // 2] ^= 0x01
    async with store.transaction() as tx:
        await tx.execute(
            "UPDATE history_segments SET data = ? WHERE id = ?", (bytes(data), damaged.id)
        )

    projections = loaded_apps(resources.config).projections
    with pytest.raises(CorruptSegment, match=f"history segment {damaged.id} "):
        await rebuild(resources, projections["link-stats"], progress=False)
    with pytest.raises(CorruptSegment, match=f"history segment {damaged.id} "):
        await visits.scan(store, "c1", 0, head)
    # The live tables are untouched and the other aggregate's replay still works.
    assert await store.fetchone("SELECT COUNT(*) FROM link_stats") == (0,)
    result = await rebuild(resources, projections["ping-counts"], progress=False)
    assert result.events == 90
