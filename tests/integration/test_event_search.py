"""Event search (docs/guides/operate.md) on both stores: every filter, the time range, the cursor,
the query plans (an index range read in page order, never a scan or a sort), and ``sluice events``
on the command line."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from sluice.app.testing import sluice_command
from sluice.builtin.accounts.events import UserRegistered
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.events import Event
from sluice.history.search import (
    EventQuery,
    FoundEvent,
    Invalid,
    decode_cursor,
    instant,
    page_sql,
    search,
    stored_time,
)
from sluice.store import Store
from tests.engine_app import APPS, Pinged

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _event(i: int) -> Event:
    trace = f"{i % 3:032x}"
    if i % 4 == 0:
        return UserRegistered(user_id=f"u{i}", email=f"u{i}@example.com", trace_id=trace)
    if i % 4 == 1:
        return LinkVisited(code=f"c{i % 2}", visitor=f"v{i}", trace_id=trace)
    return Pinged(source=f"a{i % 5}", note=f"v{i}", trace_id=trace)


async def seed(store: Store, n: int = 40) -> list[tuple[int, Event, str]]:
    """``n`` events, one per transaction, event i committed at T0 + i minutes (two of
    them at the same minute, to test ties on the time); (seq, event, created_at) each."""
    made = []
    for i in range(n):
        event = _event(i)
        async with store.transaction() as tx:
            await tx.append(event)
        at = stored_time(T0 + timedelta(minutes=i if i != 7 else 6))
        async with store.transaction() as tx:
            await tx.execute(
                "UPDATE events SET created_at = ? WHERE event_id = ?", (at, event.event_id)
            )
        row = await store.fetchone("SELECT seq FROM events WHERE event_id = ?", (event.event_id,))
        assert row is not None
        made.append((int(row[0]), event, at))
    return made


@pytest.fixture
def config(make_config: Any) -> Config:
    """The default apps and the engine's test app (tests/engine_app)."""
    return make_config(apps=APPS)


def _newest_first(made: list[tuple[int, Event, str]]) -> list[int]:
    return [seq for seq, _, at in sorted(made, key=lambda m: (m[2], m[0]), reverse=True)]


async def _all_pages(store: Store, query: EventQuery) -> list[FoundEvent]:
    found: list[FoundEvent] = []
    after = None
    while True:
        page = await search(store, replace(query, after=after))
        found += page.items
        if page.next_cursor is None:
            return found
        assert len(page.items) == query.limit
        after = decode_cursor(page.next_cursor)


async def test_each_filter_finds_exactly_its_events_newest_first_page_by_page(
    store: Store,
) -> None:
    made = await seed(store)
    cases = {
        EventQuery(limit=7): made,
        EventQuery(type="LinkVisited", limit=3): [m for m in made if isinstance(m[1], LinkVisited)],
        EventQuery(aggregate="pings", limit=4): [m for m in made if m[1].aggregate == "pings"],
        EventQuery(trace_id=f"{2:032x}", limit=2): [
            m for m in made if m[1].trace_id == f"{2:032x}"
        ],
        EventQuery(type="Pinged", trace_id=f"{1:032x}", limit=5): [
            m for m in made if isinstance(m[1], Pinged) and m[1].trace_id == f"{1:032x}"
        ],
    }
    for query, expected in cases.items():
        found = await _all_pages(store, query)
        assert [e.seq for e in found] == _newest_first(expected), query
    # What an item carries: the row and the payload as the event's JSON.
    [first] = (await search(store, EventQuery(type="UserRegistered", limit=1))).items
    seq, event, at = max(
        (m for m in made if isinstance(m[1], UserRegistered)), key=lambda m: (m[2], m[0])
    )
    assert (first.seq, first.event_id, first.aggregate, first.trace_id, first.created_at) == (
        seq,
        event.event_id,
        "users",
        event.trace_id,
        at,
    )
    data = json.loads(bytes(first.data))
    assert (data["type"], data["user_id"]) == ("UserRegistered", event.user_id)  # type: ignore[attr-defined]


async def test_the_time_range_is_inclusive_from_and_exclusive_until_with_ties_kept(
    store: Store,
) -> None:
    made = await seed(store)
    since, until = T0 + timedelta(minutes=6), T0 + timedelta(minutes=20)
    query = EventQuery(since=instant(since.isoformat()), until=instant(until.isoformat()), limit=1)
    found = await _all_pages(store, query)
    expected = [m for m in made if stored_time(since) <= m[2] < stored_time(until)]
    assert [e.seq for e in found] == _newest_first(expected)
    assert len(expected) == 14  # events 6-19: event 7 shares minute 6 with event 6
    assert found[-2].created_at == found[-1].created_at  # the tie, ordered by seq
    # An offset other than UTC names the same instant.
    assert instant("2026-11-30T13:06:00+01:00") == stored_time(since)


async def test_the_hot_since_says_how_far_back_the_search_reaches(store: Store) -> None:
    assert (await search(store, EventQuery())).hot_since is None
    made = await seed(store, 3)
    page = await search(store, EventQuery())
    assert page.hot_since == made[0][2]


@pytest.mark.parametrize(
    "check, raw",
    [
        (instant, "yesterday"),
        (instant, "2026-12-01T10:00:00"),
        (decode_cursor, "bm90IGEgY3Vyc29y"),
        (decode_cursor, "!!"),
    ],
)
def test_bad_times_and_cursors_are_refused_with_a_reason(check: object, raw: str) -> None:
    with pytest.raises(Invalid):
        check(raw)  # type: ignore[operator]


# The queries of every filter kind, alone and with the time range and a cursor; the
# ones that are one index range (a type, a trace id) and those merging several.
ONE_RANGE = [
    EventQuery(type="LinkVisited"),
    EventQuery(trace_id="f" * 32),
    EventQuery(type="LinkVisited", since=stored_time(T0), after=(stored_time(T0), 10)),
    EventQuery(trace_id="f" * 32, until=stored_time(T0), after=(stored_time(T0), 10)),
    EventQuery(aggregate="visits"),  # one type
]
MERGED = [
    EventQuery(),
    EventQuery(aggregate="users"),
    EventQuery(since=stored_time(T0), until=stored_time(T0 + timedelta(days=1))),
    EventQuery(aggregate="reminders", until=stored_time(T0), after=(stored_time(T0), 10)),
]


async def _plan(store: Store, query: EventQuery) -> list[str]:
    sql, params = page_sql(query)
    if store.dialect.name == "sqlite":
        rows = await store.fetchall("EXPLAIN QUERY PLAN " + sql, params)
        return [str(row[-1]) for row in rows]
    # With scans and sorts priced out, the plan still has one only if no index can serve
    # the query in page order: a tiny table would take a scan anyway.
    async with store.transaction() as tx:
        await tx.execute("SET LOCAL enable_seqscan = off")
        await tx.execute("SET LOCAL enable_sort = off")
        await tx.execute("SET LOCAL enable_bitmapscan = off")
        rows = await tx.fetchall("EXPLAIN " + sql, params)
    return [str(row[0]) for row in rows]


def _name(query: EventQuery) -> str:
    return ",".join(k for k, v in query.__dict__.items() if v is not None and k != "limit") or "-"


@pytest.mark.parametrize("query", ONE_RANGE + MERGED, ids=_name)
async def test_every_filter_reads_index_ranges_in_page_order_and_never_the_table(
    store: Store, query: EventQuery
) -> None:
    plan = await _plan(store, query)
    text = "\n".join(plan)
    if store.dialect.name == "sqlite":
        reads = [
            line for line in plan if " events" in line and ("SCAN" in line or "SEARCH" in line)
        ]
        assert reads and all(
            line.startswith("SEARCH events USING INDEX events_") for line in reads
        ), text
        if query in ONE_RANGE:
            assert "TEMP B-TREE" not in text, text  # read in page order: no sort at all
    else:
        assert "Index Scan Backward using events_" in text, text
        assert "Seq Scan" not in text, text
        if query in ONE_RANGE:
            assert "Sort" not in text, text


async def test_an_aggregate_and_no_filter_are_exact_across_the_merged_types(store: Store) -> None:
    """The merge of per-type ranges gives the same page as one sorted read would, with
    ties on the time across types ordered by seq."""
    made = await seed(store, 30)
    for query in (EventQuery(limit=4), EventQuery(aggregate="users", limit=2)):
        wanted = [m for m in made if query.aggregate in (None, m[1].aggregate)]
        assert [e.seq for e in await _all_pages(store, query)] == _newest_first(wanted)
    other = EventQuery(type="LinkVisited", aggregate="users")  # a type of another aggregate
    assert (await search(store, other)).items == []


async def test_sluice_events_prints_a_page_and_the_cursor_to_the_next(
    config: Config, store: Store
) -> None:
    made = await seed(store, 6)
    done = await sluice_command(config, "events", "--type", "Pinged", "--limit", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    newest = _newest_first([m for m in made if isinstance(m[1], Pinged)])
    assert lines[0].split()[0] == str(newest[0])
    assert lines[1].startswith("more: --cursor ")
    cursor = lines[1].removeprefix("more: --cursor ")
    done = await sluice_command(config, "events", "--type", "Pinged", "--cursor", cursor, "--json")
    assert done.returncode == 0, done.stderr
    page = msgspec.json.decode(done.stdout)
    assert [item["seq"] for item in page["items"]] == newest[1:]
    assert page["next_cursor"] is None and page["hot_since"] == made[0][2]
    assert page["items"][0]["data"]["type"] == "Pinged"


@pytest.mark.parametrize(
    "args, named",
    [
        (["--type", "Nope"], "is not an event type"),
        (["--since", "soon"], "RFC 3339"),
        (["--limit", "0"], "from 1 to 500"),
        (["--trace-id", "a b"], "is not a trace id"),
    ],
)
async def test_sluice_events_refuses_bad_filters_with_the_reason(
    config: Config, args: list[str], named: str
) -> None:
    done = await sluice_command(config, "events", *args)
    assert done.returncode == 2
    assert named in done.stderr
