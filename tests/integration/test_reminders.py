"""Reminders fired by three runners against one Redis and one store (docs/concepts/index.md,
docs/reference/http-api.md, 6).

Reminders are created and deleted through the API (its own store connection,
``reminder_min_interval`` lowered to one second); three ``ReminderRunner``s
run in the test process, each with its own store connection and Redis
client; the relay publishes what they commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest

from sluice.app.assembly import create_app, open_resources
from sluice.app.running import group_spec
from sluice.app.testing import wait_for
from sluice.builtin.accounts.mail import group as mail
from sluice.builtin.accounts.mail.sending import reminder_key
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.cron_runner import ReminderRunner
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.store import Store, Tx
from sluice.store.users import db_time
from tests.integration.helpers import Running
from tests.integration.mail_helpers import Received, smtp_server
from tests.integration.reminder_helpers import (
    SECOND,
    Client,
    assert_none_fired_after_deletion,
    assert_once_each,
    create,
    delete,
    drained,
    fired_at_least,
    verify_address,
)

pytestmark = pytest.mark.topologies("single", "cluster")


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(reminder_min_interval=1)


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[Client]], config: Config) -> Client:
    return await aiohttp_client(create_app(config))


@pytest.fixture
async def auth(client: Client) -> dict[str, str]:
    user = {"email": "ada@example.org", "password": "correct horse", "name": "Ada"}
    assert (await client.post("/v1/users", json=user)).status == 201
    response = await client.post("/v1/tokens", json=user)
    return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def test_three_runners_fire_each_occurrence_once_and_stop_after_deletion(
    client: Client,
    auth: dict[str, str],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_runners: Callable[..., Awaitable[list[ReminderRunner]]],
) -> None:
    every_second = await create(client, auth, "* * * * * *", "every second")
    every_two = await create(client, auth, "*/2 * * * * *", "every two seconds")
    start_relay()
    runners = await start_runners()
    await wait_for(fired_at_least(resources, every_two, 2), timeout=8)
    deleted_at = await delete(client, auth, every_two)
    before = len(await stored.occurrences(resources.store, every_second))
    await wait_for(fired_at_least(resources, every_second, before + 3), timeout=8)

    slots = await assert_once_each(resources, every_second, 1)
    assert len(slots) >= 5
    gone = await assert_once_each(resources, every_two, 2)
    await assert_none_fired_after_deletion(resources, every_two, deleted_at)
    assert all(r.scheduled == 1 for r in runners)  # every runner dropped the deleted one
    fired = sum(r.counters.fired for r in runners)
    assert fired == len(slots) + len(gone)
    assert sum(r.counters.claimed_elsewhere for r in runners) >= fired  # the others lost


async def test_a_new_reminder_is_followed_and_each_occurrence_mails_once(
    client: Client,
    auth: dict[str, str],
    resources: Resources,
    make_config: Callable[..., Config],
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    start_runners: Callable[..., Awaitable[list[ReminderRunner]]],
) -> None:
    with smtp_server() as server:
        mail_config = make_config(smtp_url=server.url, mail_from="Sluice <hi@sluice.test>")
        spec = group_spec(mail.mail_group, dataclasses.replace(resources, config=mail_config))
        start_relay()
        start_worker(spec=spec, config=mail_config)
        # The periodic reload is far away: a runner learns of the reminder from the stream.
        runners = await start_runners(reload_seconds=600)
        await verify_address(client, auth, resources)
        created_at = utcnow()
        reminder_id = await create(client, auth, "* * * * * *", "drink water")
        await wait_for(fired_at_least(resources, reminder_id, 1), timeout=2.5, exact=True)
        first = (await stored.occurrences(resources.store, reminder_id))[0]
        assert first <= created_at + 2 * SECOND
        assert all(r.scheduled == 1 for r in runners)

        await wait_for(fired_at_least(resources, reminder_id, 3), timeout=5)
        await delete(client, auth, reminder_id)
        slots = await assert_once_each(resources, reminder_id, 1)

        def reminder_mails() -> list[Received]:
            # A long Message-ID is folded onto its own line: strip the fold's space.
            return [r for r in server.messages() if r.message_id.strip().startswith("<reminder_")]

        async def all_mailed() -> bool:
            return len(reminder_mails()) >= len(slots)

        await wait_for(all_mailed, timeout=10)
        await wait_for(drained(resources), timeout=10)
        received = reminder_mails()
        ids = sorted(r.message_id.strip() for r in received)
        assert ids == sorted(f"<{reminder_key(reminder_id, s)}@sluice.test>" for s in slots)
        assert all(r.rcpt_tos == ["ada@example.org"] for r in received)
        assert received[0].message["Subject"] == "Reminder: drink water"
        assert "drink water" in received[0].message.get_content()


class GatedStore:
    """A runner's store whose next transaction, once armed, waits for the test's go."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.armed = False
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        if self.armed:
            self.armed = False
            self.entered.set()
            await self.go.wait()
        async with self._store.transaction() as tx:
            yield tx


async def test_an_occurrence_in_flight_when_the_deletion_commits_does_not_fire(
    client: Client, auth: dict[str, str], config: Config, running: Running
) -> None:
    """The runner has taken an occurrence (its slot came before the deletion) and is
    about to record it when the DELETE commits: the occurrence must not fire."""
    reminder_id = await create(client, auth, "* * * * * *", "deleted mid-fire")
    async with open_resources(config) as resources:
        gated = GatedStore(resources.store)
        runner = ReminderRunner(
            dataclasses.replace(resources, store=cast(Store, gated)), holder="gated"
        )
        running.start(runner.run(running.stop))
        await wait_for(fired_at_least(resources, reminder_id, 2), timeout=5)
        gated.armed = True
        await wait_for(event_set(gated.entered), timeout=3)  # the next occurrence, in hand
        deleted_at = await delete(client, auth, reminder_id)
        gated.go.set()

        async def dropped() -> bool:
            return runner.scheduled == 0

        await wait_for(dropped, timeout=5)
        await running.close()
        await assert_none_fired_after_deletion(resources, reminder_id, deleted_at)
        await assert_once_each(resources, reminder_id, 1)


def event_set(event: asyncio.Event) -> Callable[[], Awaitable[bool]]:
    async def is_set() -> bool:
        return event.is_set()

    return is_set


@pytest.mark.topologies("single", "partitioned")  # stops or pauses the one Redis server
async def test_without_redis_runners_fire_each_occurrence_once_and_honour_deletions(
    client: Client,
    auth: dict[str, str],
    resources: Resources,
    redis_server: RedisServer,
    start_runners: Callable[..., Awaitable[list[ReminderRunner]]],
) -> None:
    kept = await create(client, auth, "* * * * * *", "no redis")
    dropped = await create(client, auth, "* * * * * *", "deleted without redis")
    runners = await start_runners()
    await asyncio.to_thread(redis_server.stop)
    await wait_for(fired_at_least(resources, dropped, 2), timeout=5)
    # No stream to follow: only the database tells the runners about this deletion.
    deleted_at = await delete(client, auth, dropped)
    before = len(await stored.occurrences(resources.store, kept))
    await wait_for(fired_at_least(resources, kept, before + 3), timeout=8)

    slots = await assert_once_each(resources, kept, 1)
    gone = await assert_once_each(resources, dropped, 1)
    await assert_none_fired_after_deletion(resources, dropped, deleted_at)
    assert sum(r.counters.fired for r in runners) == len(slots) + len(gone)
    assert sum(r.counters.already_fired for r in runners) > 0  # the database said no
    assert all(r.scheduled == 1 for r in runners)


async def test_after_a_restart_recent_misses_fire_late_and_older_ones_are_skipped(
    client: Client,
    auth: dict[str, str],
    resources: Resources,
    start_runners: Callable[..., Awaitable[list[ReminderRunner]]],
) -> None:
    reminder_id = await create(client, auth, "* * * * * *", "catch up")
    # As if the reminder had been created 30 s ago and no scheduler had run since.
    created = utcnow() - 30 * SECOND
    async with resources.store.transaction() as tx:
        await tx.execute(
            "UPDATE reminders SET created_at = ? WHERE id = ?",
            (db_time(created), reminder_id),
        )
    started = utcnow()
    [runner] = await start_runners(1, catch_up_seconds=5)
    await wait_for(fired_at_least(resources, reminder_id, 6), timeout=5)

    slots = await assert_once_each(resources, reminder_id, 1)
    late = [s for s in slots if s < started]
    assert 3 <= len(late) <= 6  # the last 5 s (less the start-up time), fired at once
    assert min(slots) >= started - 6 * SECOND  # nothing older
    assert runner.agenda.skipped_late == 1
