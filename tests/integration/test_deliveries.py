"""Deliveries and the story of a request (docs/guides/operate.md): every attempt of every group on
every event, as ``GET /v1/admin/traces/{id}`` and ``GET /v1/admin/events/{id}`` show
them, the handler deadline, and the purge of old records."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from sluice.app.assembly import create_app, default_apps, loaded_apps
from sluice.app.testing import wait_for
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.projections.replay import rebuild
from sluice.records import deliveries
from sluice.records.attempts import Attempt
from sluice.relay.relay import Relay
from sluice.streams.messages import Delivery
from sluice.streams.spec import GroupSpec
from sluice.telemetry.prometheus import HANDLER_TIMEOUTS
from tests.engine_app import APPS, Pinged

pytestmark = pytest.mark.topologies("single")

TOKEN = "deliveries-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
Client = TestClient[Any, Any]


@pytest.fixture
async def admin(
    make_config: Callable[..., Config],
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> Client:
    return await aiohttp_client(create_app(make_config(admin_token=TOKEN)))


async def get(admin: Client, path: str, status: int = 200) -> Any:
    response = await admin.get(path, headers=ADMIN)
    assert response.status == status, await response.text()
    return await response.json()


async def outcomes(admin: Client, trace: str, group: str) -> list[tuple[int, str]]:
    story = await get(admin, f"/v1/admin/traces/{trace}")
    return [
        (d["attempt"], d["outcome"])
        for e in story["events"]
        for d in e["deliveries"]
        if d["group"] == group
    ]


async def test_a_registrations_trace_shows_the_mail_handled_then_a_redelivery_as_duplicate(
    admin: Client,
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    response = await admin.post(
        "/v1/users", json={"email": "ada@example.com", "password": "correct horse battery"}
    )
    assert response.status == 201, await response.text()
    trace = response.headers["X-Trace-Id"]
    start_relay()
    start_worker("mail", name="m1")

    async def mailed() -> bool:
        return await outcomes(admin, trace, "mail") == [(1, "handled")]

    await wait_for(mailed)
    # The same event published again (a relay crash between XADD and its position):
    # the mail group gets a second entry of it, and sends nothing.
    [event] = await resources.store.events_after(0, 10, types=("UserRegistered",))
    async with Relay(resources.store, resources.redis, resources.keys) as publisher:
        await publisher.publish([event])

    async def duplicate_seen() -> bool:
        return await outcomes(admin, trace, "mail") == [(1, "handled"), (1, "duplicate")]

    await wait_for(duplicate_seen)
    story = await get(admin, f"/v1/admin/traces/{trace}")
    assert [e["type"] for e in story["events"]] == ["UserRegistered"]
    assert story["trace_id"] == trace and story["truncated"] is False
    [registered] = story["events"]
    assert registered["data"]["email"] == "ada@example.com"
    mail = [d for d in registered["deliveries"] if d["group"] == "mail"]
    assert all(d["consumer"] == "m1" and d["error"] is None for d in mail)
    assert all(d["duration_ms"] >= 0 and d["started_at"] for d in mail)
    # Two entries of the one event: the relay's and the republished copy.
    stream = resources.keys.stream("users")
    assert {(s["stream"]) for s in registered["stream_entries"]} == {stream}
    assert len({s["entry_id"] for s in registered["stream_entries"]}) == 2

    one = await get(admin, f"/v1/admin/events/{registered['event_id']}")
    assert one["deliveries"] == registered["deliveries"]
    assert one["seq"] == registered["seq"] and one["type"] == "UserRegistered"


@pytest.mark.apps(APPS)
async def test_a_projection_records_its_attempts_with_its_effect_once_each(
    admin: Client,
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    # Projections write their attempts in the transaction of the effect: each attempt
    # is there once (the consumer does not write it again), and a copy is a duplicate.
    async with resources.store.transaction() as tx:
        await tx.append(Pinged(source="a1", trace_id="pings-trace-1"))
    start_relay()
    start_worker("ping-counts", name="v1")

    async def counted() -> bool:
        return await outcomes(admin, "pings-trace-1", "ping-counts") == [(1, "handled")]

    await wait_for(counted)
    [event] = await resources.store.events_after(0, 10, types=("Pinged",))
    async with Relay(resources.store, resources.redis, resources.keys) as publisher:
        await publisher.publish([event])

    async def duplicate_seen() -> bool:
        found = await outcomes(admin, "pings-trace-1", "ping-counts")
        return found == [(1, "handled"), (1, "duplicate")]

    await wait_for(duplicate_seen)
    story = await get(admin, "/v1/admin/traces/pings-trace-1")
    counts = [d for d in story["events"][0]["deliveries"] if d["group"] == "ping-counts"]
    assert all(d["consumer"] == "v1" and d["error"] is None for d in counts)
    assert len({d["entry_id"] for d in counts}) == 2
    rows = await resources.store.fetchall(
        "SELECT pings FROM engine_ping_counts WHERE source = ?", ("a1",)
    )
    assert [tuple(r) for r in rows] == [(1,)]


@pytest.mark.apps(APPS)  # the engine's test app (tests/engine_app)
async def test_a_poison_events_trace_shows_each_failed_attempt_and_the_dead_letter(
    admin: Client,
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    async def refuses(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        return {d.message.key: ValueError("no such source") for d in ds}

    async with resources.store.transaction() as tx:
        await tx.append(Pinged(source="a1", trace_id="poison-trace-1"))
    start_relay()
    config = make_config(retry_base_ms=40, max_deliveries=3)
    start_worker(spec=GroupSpec("refuser", ("pings",), refuses), config=config, name="r1")

    async def dead() -> bool:
        return [o for _, o in await outcomes(admin, "poison-trace-1", "refuser")][-1:] == [
            "dead_lettered"
        ]

    await wait_for(dead)
    story = await get(admin, "/v1/admin/traces/poison-trace-1")
    attempts = [d for d in story["events"][0]["deliveries"] if d["group"] == "refuser"]
    assert [(d["attempt"], d["outcome"]) for d in attempts] == [
        (1, "failed"),
        (2, "failed"),
        (3, "dead_lettered"),
    ]
    assert {d["error"] for d in attempts} == {"ValueError: no such source"}
    # The first from the aggregate stream, the retries from the group's retry stream.
    streams = [d["stream"] for d in attempts]
    assert streams[0] == resources.keys.stream("pings")
    assert set(streams[1:]) == {resources.keys.retry("refuser")}


@pytest.mark.apps(APPS)
async def test_a_handler_past_its_deadline_is_cancelled_and_the_attempt_fails(
    admin: Client,
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    cancelled = asyncio.Event()

    async def hangs(ds: Sequence[Delivery]) -> Mapping[tuple[str, str], BaseException]:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    # The deadline of this group only; every other group keeps the default.
    config = make_config(
        retry_base_ms=40,
        max_deliveries=2,
        group_timeouts={"sleeper": 0.3},
        handler_timeout_seconds=600.0,
    )
    assert config.handler_timeout("sleeper") == 0.3
    assert config.handler_timeout("mail") == 600.0
    before = HANDLER_TIMEOUTS.labels("sleeper")._value.get()
    async with resources.store.transaction() as tx:
        await tx.append(Pinged(source="a1", trace_id="slow-trace-1"))
    start_relay()
    start_worker(spec=GroupSpec("sleeper", ("pings",), hangs), config=config, name="s1")

    async def given_up() -> bool:
        return [o for _, o in await outcomes(admin, "slow-trace-1", "sleeper")] == [
            "failed",
            "dead_lettered",
        ]

    await wait_for(given_up, timeout=15)
    assert cancelled.is_set()
    story = await get(admin, "/v1/admin/traces/slow-trace-1")
    attempts = [d for d in story["events"][0]["deliveries"] if d["group"] == "sleeper"]
    assert all(d["error"].startswith("HandlerTimeout: no outcome within 0.3 s") for d in attempts)
    assert all(250 <= d["duration_ms"] < 5000 for d in attempts)
    assert HANDLER_TIMEOUTS.labels("sleeper")._value.get() - before == 2


async def test_the_purge_removes_only_records_older_than_the_retention(
    resources: Resources,
) -> None:
    now = utcnow()

    def attempt(n: int, age: timedelta) -> Attempt:
        return Attempt(
            f"e{n}", "mail", "c", "s", f"{n}-0", 1, "handled", None, (now - age).isoformat(), 1.0
        )

    old = [attempt(n, timedelta(days=8, minutes=n)) for n in range(12)]
    young = [attempt(100 + n, timedelta(days=6)) for n in range(3)]
    await deliveries.write(resources.store, old[::-1] + young)
    assert await deliveries.purge(resources.store, now, 7 * 86_400, batch=5) == 12
    processed = [p.processed_table for p in default_apps().projections.values()]
    ids = [f"e{n}" for n in (0, 100, 101, 102)]
    left = await deliveries.of_events(resources.store, ids, processed)
    assert [len(v) for v in left.values()] == [0, 1, 1, 1]
    assert await deliveries.purge(resources.store, now, 7 * 86_400) == 0


@pytest.mark.apps(APPS)
async def test_a_projection_batch_is_one_record_row_and_a_replay_keeps_each_events_attempt(
    admin: Client,
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    store = resources.store
    async with store.transaction() as tx:
        await tx.append(
            *(Pinged(source="a1", note=f"v{i}", trace_id="pings-batch") for i in range(40))
        )
    start_relay()
    start_worker("ping-counts", name="v1")

    async def each_handled_once() -> bool:
        return await outcomes(admin, "pings-batch", "ping-counts") == [(1, "handled")] * 40

    await wait_for(each_handled_once)
    # The 40 attempts are in the rows of their batches (one per XREADGROUP), none alone.
    batches = await store.fetchone("SELECT COUNT(*) FROM delivery_batches")
    assert batches is not None and 1 <= batches[0] <= 4
    alone = await store.fetchone(
        "SELECT COUNT(*) FROM deliveries WHERE group_name = ?", ("ping-counts",)
    )
    assert alone == (0,)
    [event, *_] = await store.events_after(0, 1, types=("Pinged",))
    detail = await get(admin, f"/v1/admin/events/{event.event_id}")
    [attempt] = [d for d in detail["deliveries"] if d["group"] == "ping-counts"]
    assert attempt["consumer"] == "v1" and attempt["attempt"] == 1 and attempt["error"] is None
    assert {"stream": attempt["stream"], "entry_id": attempt["entry_id"]} in detail[
        "stream_entries"
    ]

    await rebuild(
        resources, loaded_apps(resources.config).projections["ping-counts"], progress=False
    )
    assert await outcomes(admin, "pings-batch", "ping-counts") == [(1, "handled")] * 40


async def test_the_purge_removes_old_batches_of_projection_attempts_too(
    resources: Resources,
) -> None:
    store, now = resources.store, utcnow()
    async with store.transaction() as tx:
        for n, age in enumerate([timedelta(days=9)] * 3 + [timedelta(days=1)] * 2):
            await tx.execute(
                "INSERT INTO delivery_batches (id, group_name, consumer, started_at,"
                " duration_ms, entries) VALUES (?, 'article-views', 'c', ?, 1.0, ?)",
                (
                    n + 1,
                    (now - age).isoformat(),
                    zlib.compress(msgspec.msgpack.encode([(f"e{n}", "s", f"{n}-0", 1)])),
                ),
            )
    assert await deliveries.purge(store, now, 7 * 86_400, batch=2) == 3
    assert await store.fetchone("SELECT COUNT(*) FROM delivery_batches") == (2,)


async def test_the_event_and_trace_routes_answer_their_errors(admin: Client) -> None:
    missing = await get(admin, "/v1/admin/events/0191a4b6-0000-7000-8000-000000000000", 404)
    assert missing["status"] == 404
    assert (await get(admin, "/v1/admin/events/" + "x" * 100, 404))["status"] == 404
    bad = await get(admin, "/v1/admin/traces/not%20a%20trace", 422)
    assert [e["field"] for e in bad["errors"]] == ["trace_id"]
    empty = await get(admin, "/v1/admin/traces/no-such-trace")
    assert empty == {
        "trace_id": "no-such-trace",
        "events": [],
        "truncated": False,
        "trace_url": None,  # no SLUICE_TRACE_URL
    }
    for path in ("/v1/admin/events/e1", "/v1/admin/traces/t1"):
        assert (await admin.get(path)).status == 401
