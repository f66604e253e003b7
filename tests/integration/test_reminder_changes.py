"""One-shot reminders and PATCH with real ``sluice scheduler`` processes (docs/guides/tasks.md).

The API runs in the test process (``reminder_min_interval`` one second); the
schedulers are children, started with their logs in files so the test knows
when each one's runners run; the relay (in the test process) publishes the
events the cron runners follow.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sluice.app.assembly import create_app
from sluice.app.running import group_spec
from sluice.app.testing import Child, patience, wait_for
from sluice.builtin.accounts.mail import group as mail
from sluice.builtin.accounts.mail.sending import reminder_key
from sluice.builtin.reminders.events import ReminderDue
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.events import decode, utcnow
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.store.users import from_db_time
from tests.integration.mail_helpers import Received, smtp_server
from tests.integration.reminder_helpers import create, drained, fired_at_least, verify_address

SECOND = timedelta(seconds=1)


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(reminder_min_interval=1)


@pytest.fixture
async def auth(config: Config, aiohttp_client: Callable[..., Any]) -> tuple[Any, dict[str, str]]:
    client = await aiohttp_client(create_app(config))
    user = {"email": "ada@example.org", "password": "correct horse"}
    assert (await client.post("/v1/users", json=user)).status == 201
    token = (await (await client.post("/v1/tokens", json=user)).json())["token"]
    return client, {"Authorization": f"Bearer {token}"}


def scheduler(spawn: Callable[..., Child], log: Path) -> Child:
    return spawn("scheduler", log=log, SLUICE_LOG_LEVEL="info")


def started(*logs: Path) -> Callable[[], Awaitable[bool]]:
    """Every scheduler's runners run (their start lines are in its log)."""

    async def all_started() -> bool:
        texts = [log.read_text() if log.exists() else "" for log in logs]
        return all("one-shot runner started" in t and "reminders loaded" in t for t in texts)

    return all_started


async def one_shot(client: Any, auth: dict[str, str], at: datetime, text: str = "once") -> str:
    body = {"at": at.isoformat(), "text": text}
    response = await client.post("/v1/reminders", json=body, headers=auth)
    assert response.status == 201, await response.text()
    reminder_id: str = (await response.json())["id"]
    return reminder_id


async def fired(resources: Resources) -> dict[str, list[tuple[datetime, datetime]]]:
    """(slot, fired_at) of every recorded occurrence, per reminder."""
    rows = await resources.store.fetchall(
        "SELECT reminder_id, scheduled_for, fired_at FROM reminder_occurrences"
    )
    found: dict[str, list[tuple[datetime, datetime]]] = {}
    for reminder_id, slot, at in rows:
        found.setdefault(str(reminder_id), []).append((from_db_time(slot), from_db_time(at)))
    return found


async def due_events(resources: Resources) -> list[ReminderDue]:
    rows = await resources.store.events_after(0, 100_000, types=["ReminderDue"])
    return [e for e in (decode(r.payload) for r in rows) if isinstance(e, ReminderDue)]


async def assert_fired_once_on_time(
    resources: Resources, client: Any, auth: dict[str, str], ids: list[str], at: datetime
) -> None:
    """One occurrence row and one ReminderDue each, fired within a second of ``at``,
    and ``status: done``."""
    occurrences = await fired(resources)
    due = [e.reminder_id for e in await due_events(resources)]
    for reminder_id in ids:
        [(slot, fired_at)] = occurrences[reminder_id]
        assert slot == at and timedelta(0) <= fired_at - at < SECOND, (slot, fired_at)
        assert due.count(reminder_id) == 1
        answer = await (await client.get(f"/v1/reminders/{reminder_id}", headers=auth)).json()
        assert answer["status"] == "done"


@pytest.mark.timeout(90)
async def test_one_shots_fire_once_within_a_second_with_two_schedulers(
    auth: tuple[Any, dict[str, str]],
    resources: Resources,
    spawn: Callable[..., Child],
    tmp_path: Path,
) -> None:
    client, headers = auth
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    for log in logs:
        scheduler(spawn, log)
    await wait_for(started(*logs), timeout=30)
    at = (utcnow() + patience(2) * SECOND).replace(microsecond=0)  # past the 30 made next
    ids = [await one_shot(client, headers, at, f"order {i}") for i in range(30)]

    async def all_fired() -> bool:
        return len((await fired(resources)).keys() & set(ids)) == len(ids)

    await wait_for(all_fired, timeout=10)
    await asyncio.sleep(0.5)  # a second firing, were there one, would come now: there is none
    await assert_fired_once_on_time(resources, client, headers, ids, at)


@pytest.mark.timeout(90)
@pytest.mark.stores("sqlite")  # the claims on PostgreSQL: the tests of many one-shots
async def test_a_one_shot_survives_a_scheduler_restart_before_it_is_due(
    auth: tuple[Any, dict[str, str]],
    resources: Resources,
    spawn: Callable[..., Child],
    tmp_path: Path,
) -> None:
    client, headers = auth
    first = scheduler(spawn, tmp_path / "first.log")
    await wait_for(started(tmp_path / "first.log"), timeout=30)
    at = (utcnow() + patience(15) * SECOND).replace(microsecond=0)  # past the restart below
    reminder_id = await one_shot(client, headers, at)
    first.kill()
    scheduler(spawn, tmp_path / "second.log")
    await wait_for(started(tmp_path / "second.log"), timeout=30)
    assert utcnow() < at - SECOND, "the second scheduler came up too late to tell"

    async def done() -> bool:
        return reminder_id in await fired(resources)

    await wait_for(done, timeout=15)
    await assert_fired_once_on_time(resources, client, headers, [reminder_id], at)


@pytest.mark.timeout(90)
@pytest.mark.stores("sqlite")  # the claims on PostgreSQL: the tests of many one-shots
async def test_a_one_shot_fires_on_time_while_redis_is_down(
    auth: tuple[Any, dict[str, str]],
    resources: Resources,
    spawn: Callable[..., Child],
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """One-shots are claimed and fired in the database alone: a Redis outage around their
    instant changes nothing (ReminderDue waits in the outbox for the relay)."""
    client, headers = auth
    scheduler(spawn, tmp_path / "s.log")
    await wait_for(started(tmp_path / "s.log"), timeout=30)
    at = (utcnow() + patience(4) * SECOND).replace(microsecond=0)
    reminder_id = await one_shot(client, headers, at)
    await asyncio.to_thread(redis_server.stop)
    try:
        assert utcnow() < at, "Redis stopped too late to tell"

        async def done() -> bool:
            return reminder_id in await fired(resources)

        await wait_for(done, timeout=15)
        occurrences = await fired(resources)
        [(slot, fired_at)] = occurrences[reminder_id]
        assert slot == at and timedelta(0) <= fired_at - at < SECOND, (slot, fired_at)
        assert [e.reminder_id for e in await due_events(resources)].count(reminder_id) == 1
    finally:
        await asyncio.to_thread(redis_server.start)


@pytest.mark.timeout(120)
@pytest.mark.stores("sqlite")  # the claims on PostgreSQL: the tests of many one-shots
async def test_a_patch_is_followed_by_every_scheduler_within_two_seconds(
    auth: tuple[Any, dict[str, str]],
    resources: Resources,
    spawn: Callable[..., Child],
    start_relay: Callable[..., Relay],
    tmp_path: Path,
) -> None:
    client, headers = auth
    reminder_id = await create(client, headers, "* * * * * *", "every second")
    start_relay()
    logs = [tmp_path / f"{name}.log" for name in "abc"]
    for log in logs:
        scheduler(spawn, log)
    await wait_for(started(*logs), timeout=30)
    await wait_for(fired_at_least(resources, reminder_id, 2), timeout=10)

    path = f"/v1/reminders/{reminder_id}"
    body = {"cron": "*/3 * * * * *", "text": "every third second"}
    before = utcnow()
    response = await client.patch(path, json=body, headers=headers)
    assert response.status == 200, await response.text()
    changed = utcnow()
    count = len((await fired(resources))[reminder_id])
    await wait_for(fired_at_least(resources, reminder_id, count + 3), timeout=12)
    await _assert_new_schedule(resources, reminder_id, before, changed, "every third second")

    response = await client.patch(path, json={"paused": True}, headers=headers)
    assert (await response.json())["status"] == "paused"
    paused = utcnow()
    await asyncio.sleep(3.5)  # a paused reminder's slots pass: none may fire
    assert await _after(resources, reminder_id, paused) == []
    resuming = utcnow()
    response = await client.patch(path, json={"paused": False}, headers=headers)
    assert (await response.json())["status"] == "active"
    count = len((await fired(resources))[reminder_id])
    await wait_for(fired_at_least(resources, reminder_id, count + 2), timeout=10)
    slots = await _after(resources, reminder_id, resuming)
    assert len(slots) >= 2 and all(s > resuming for s in slots)  # nothing missed while paused


async def _after(resources: Resources, reminder_id: str, moment: datetime) -> list[datetime]:
    """The slots of the occurrences fired after ``moment``."""
    return sorted(s for s, f in (await fired(resources))[reminder_id] if f > moment)


async def _assert_new_schedule(
    resources: Resources, reminder_id: str, before: datetime, changed: datetime, text: str
) -> None:
    """What fired after the PATCH answered: slots of the new schedule (every third second)
    after the PATCH began, each once with the new text, each on time from 2 s after the
    change (every replica has followed by then)."""
    new = [(s, f) for s, f in sorted((await fired(resources))[reminder_id]) if f > changed]
    assert len(new) >= 3
    assert all(s > before and s.second % 3 == 0 for s, _ in new), new
    assert all(f - s < SECOND for s, f in new if s >= changed + 2 * SECOND), new
    slots = {s for s, _ in new}
    due = [e for e in await due_events(resources) if e.reminder_id == reminder_id]
    assert sorted(e.scheduled_for for e in due if e.scheduled_for in slots) == sorted(slots)
    assert {e.text for e in due if e.scheduled_for in slots} == {text}


@pytest.mark.timeout(120)
async def test_two_hundred_one_shots_due_together_mail_once_each_across_three_schedulers(
    auth: tuple[Any, dict[str, str]],
    resources: Resources,
    spawn: Callable[..., Child],
    make_config: Callable[..., Config],
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    tmp_path: Path,
) -> None:
    client, headers = auth
    with smtp_server() as server:
        mail_config = make_config(
            smtp_url=server.url,
            mail_from="Sluice <hi@sluice.test>",
            mail_rate=1000.0,
            mail_user_hourly=1000,
            mail_user_daily=1000,
        )
        start_relay()
        start_worker(
            spec=group_spec(mail.mail_group, dataclasses.replace(resources, config=mail_config)),
            config=mail_config,
        )
        await verify_address(client, headers, resources)
        logs = [tmp_path / f"{name}.log" for name in "abc"]
        for log in logs:
            scheduler(spawn, log)
        await wait_for(started(*logs), timeout=30)
        # Made 20 at a time, well ahead: 200 one at a time took over 4 s in a full run, and
        # over 8 s in one beside other work (the at was past for the last ones: 422).
        at = (utcnow() + patience(8) * SECOND).replace(microsecond=0)
        making = asyncio.Semaphore(20)

        async def make(i: int) -> str:
            async with making:
                return await one_shot(client, headers, at, f"order {i}")

        ids = await asyncio.gather(*(make(i) for i in range(200)))
        assert utcnow() < at, "the one-shots were made too late to be due together"

        def mailed() -> list[Received]:
            return [r for r in server.messages() if r.message_id.strip().startswith("<reminder_")]

        async def all_mailed() -> bool:
            return len(mailed()) >= len(ids)

        await wait_for(all_mailed, timeout=30)
        await wait_for(drained(resources), timeout=10)
        await assert_fired_once_on_time(resources, client, headers, ids, at)
        expected = sorted(f"<{reminder_key(i, at)}@sluice.test>" for i in ids)
        assert sorted(r.message_id.strip() for r in mailed()) == expected


@pytest.mark.timeout(90)
@pytest.mark.stores("sqlite")  # the claims on PostgreSQL: the tests of many one-shots
async def test_a_one_shot_due_while_no_scheduler_runs_fires_once_when_one_starts(
    auth: tuple[Any, dict[str, str]],
    resources: Resources,
    spawn: Callable[..., Child],
    tmp_path: Path,
) -> None:
    client, headers = auth
    at = (utcnow() + patience(2) * SECOND).replace(microsecond=0)
    reminder_id = await one_shot(client, headers, at)

    async def past_due() -> bool:
        return utcnow() > at + SECOND

    await wait_for(past_due, timeout=10)
    assert reminder_id not in await fired(resources)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    for log in logs:
        scheduler(spawn, log)

    async def done() -> bool:
        return reminder_id in await fired(resources)

    await wait_for(done, timeout=30)
    await wait_for(started(*logs), timeout=30)
    [(slot, fired_at)] = (await fired(resources))[reminder_id]
    assert slot == at and fired_at > at + SECOND  # late, once: never skipped
    assert [e.reminder_id for e in await due_events(resources)].count(reminder_id) == 1
    answer = await (await client.get(f"/v1/reminders/{reminder_id}", headers=headers)).json()
    assert answer["status"] == "done"
