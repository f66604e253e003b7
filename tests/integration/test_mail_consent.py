"""Mail only to verified addresses, within each user's budget, with a one-click unsubscribe
(docs/guides/security.md; issue 20, finding 2).

The reproduction: register ``victim@example.org`` as "Security Team" and create a
reminder with a phishing text. Before this fix the victim got a mail per
occurrence and could not stop them. Now the address gets the welcome mail only
(its occurrences are recorded, their mails withheld); once the link of the
welcome mail is followed, reminders mail, each with ``List-Unsubscribe``, and a
POST to that URL pauses the reminder on every scheduler replica.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import REGISTRY

from sluice.app.assembly import create_app, open_resources
from sluice.app.running import group_spec
from sluice.app.testing import wait_for
from sluice.builtin.accounts.keys import AccountsKeys
from sluice.builtin.accounts.mail import group as mail
from sluice.builtin.accounts.mail.budget import BudgetUnavailable, Spent, UserBudget
from sluice.builtin.accounts.mail.links import load_link_key, unsubscribe_token
from sluice.builtin.accounts.stored import insert_user
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.cron_runner import ReminderRunner
from sluice.builtin.reminders.events import ReminderDue
from sluice.builtin.reminders.stored import Reminder, insert_reminder
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.store.users import User, db_time
from tests.integration.mail_helpers import Received, dead_letters, drained, smtp_server

pytestmark = pytest.mark.topologies("single", "cluster")

Client = TestClient[Any, Any]
PHISHING = "Your account is locked. Unlock it at https://evil.example/login"
_LINK = re.compile(r"https?://\S+?(/v1/verify\?token=\S+)")


def withheld(reason: str) -> float:
    return REGISTRY.get_sample_value("sluice_mails_withheld_total", {"reason": reason}) or 0.0


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config(reminder_min_interval=1)


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[Client]], config: Config) -> Client:
    return await aiohttp_client(create_app(config))


def _fired(resources: Resources, reminder_id: str, count: int) -> Callable[[], Awaitable[bool]]:
    async def enough() -> bool:
        return len(await stored.occurrences(resources.store, reminder_id)) >= count

    return enough


def _settled(resources: Resources) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return await drained(resources, ("users", "reminders"))

    return done


async def _victim(client: Client) -> dict[str, str]:
    body = {"email": "victim@example.org", "password": "correct horse", "name": "Security Team"}
    assert (await client.post("/v1/users", json=body)).status == 201
    response = await client.post("/v1/tokens", json=body)
    return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def _follow_welcome_link(client: Client, welcome: Received) -> None:
    """What the victim (or whoever owns the address) does: open the link, press the button."""
    match = _LINK.search(welcome.message.get_content())
    assert match, welcome.message.get_content()
    page = await client.get(match[1])
    assert page.status == 200
    token = re.search(r'name="token" value="([^"]+)"', await page.text())
    assert token
    assert (await client.post("/v1/users/verify", data={"token": token[1]})).status == 200


async def test_an_unverified_address_gets_no_reminder_mail_and_one_click_pauses_it(
    client: Client,
    resources: Resources,
    make_config: Callable[..., Config],
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    start_runners: Callable[..., Awaitable[list[ReminderRunner]]],
) -> None:
    with smtp_server() as server:
        mail_config = make_config(smtp_url=server.url, reminder_min_interval=1)
        start_relay()
        start_worker(
            spec=group_spec(mail.mail_group, dataclasses.replace(resources, config=mail_config)),
            config=mail_config,
        )
        # Learning of changes from the stream only (the reload is far away).
        runners = await start_runners(2, reload_seconds=600)
        auth = await _victim(client)
        body = {"cron": "* * * * * *", "timezone": "UTC", "text": PHISHING}
        created = await client.post("/v1/reminders", json=body, headers=auth)
        reminder_id = (await created.json())["id"]
        before = withheld("unverified")

        await wait_for(_fired(resources, reminder_id, 3), timeout=8)
        await wait_for(_settled(resources))
        [welcome] = server.messages()  # the occurrences fired, nothing but the welcome went out
        assert welcome.rcpt_tos == ["victim@example.org"]
        assert "Reminders are mailed only once it is confirmed." in welcome.message.get_content()
        assert withheld("unverified") - before >= 3

        await _follow_welcome_link(client, welcome)
        verified_at = utcnow()
        me = await (await client.get("/v1/me", headers=auth)).json()
        assert me["verified"] is True

        def reminder_mails() -> list[Received]:
            return [r for r in server.messages() if r is not welcome]

        async def mailed_twice() -> bool:
            return len(reminder_mails()) >= 2

        await wait_for(mailed_twice, timeout=8)
        first = reminder_mails()[0]
        assert first.rcpt_tos == ["victim@example.org"]
        assert first.at >= verified_at.timestamp()
        unsubscribe = first.message["List-Unsubscribe"]
        assert re.fullmatch(r"<https?://[^>]+/v1/unsubscribe\?token=u1\.[^>]+>", unsubscribe)
        assert first.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        assert unsubscribe.strip("<>") in first.message.get_content()

        # The mail provider's one-click POST (RFC 8058): no sign-in, no cookie.
        url = urlsplit(unsubscribe.strip("<>"))
        answer = await client.post(
            f"{url.path}?{url.query}", data={"List-Unsubscribe": "One-Click"}
        )
        assert answer.status == 200
        paused_at = utcnow()

        async def every_replica_dropped_it() -> bool:
            return all(r.scheduled == 0 for r in runners)

        await wait_for(every_replica_dropped_it, timeout=2, exact=True)
        await asyncio.sleep(2)  # two more occurrences' time: none may fire
        slots = await stored.occurrences(resources.store, reminder_id)
        assert max(slots) <= paused_at
        await wait_for(_settled(resources))
        mailed = reminder_mails()
        assert all(r.at >= verified_at.timestamp() for r in mailed)
        assert len(mailed) <= len(slots)
        listed = await (await client.get("/v1/reminders", headers=auth)).json()
        assert listed["items"][0]["status"] == "paused"
        assert await dead_letters(resources) == []


async def _verified_owner_with_reminder(resources: Resources) -> Reminder:
    now = utcnow()
    user = User(id="u-budget", email="busy@example.org", name="Busy", created_at=now)
    reminder = Reminder(
        id="r-budget",
        owner_id=user.id,
        cron="* * * * * *",
        timezone="UTC",
        text="tick",
        created_at=now,
    )
    async with resources.store.transaction() as tx:
        await insert_user(tx, user, "not-a-hash")
        await tx.execute("UPDATE users SET verified_at = ? WHERE id = ?", (db_time(now), user.id))
        await insert_reminder(tx, reminder)
    return reminder


async def test_the_mail_budget_holds_across_two_mail_workers(
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(mail_user_hourly=4, mail_user_daily=100)
    reminder = await _verified_owner_with_reminder(resources)
    async with AsyncExitStack() as stack:
        for name in ("w1", "w2"):  # two replicas: their own Redis clients and budgets
            own = await stack.enter_async_context(open_resources(config))
            start_worker(spec=group_spec(mail.mail_group, own), name=name, config=config)
        start_relay()
        before = withheld("over_budget")
        start = utcnow().replace(microsecond=0)
        async with resources.store.transaction() as tx:
            for i in range(10):
                await tx.append(
                    ReminderDue(
                        reminder_id=reminder.id,
                        owner_id=reminder.owner_id,
                        text="tick",
                        scheduled_for=start + timedelta(seconds=i),
                    )
                )
        await wait_for(_settled(resources))

        mails = list((Path(config.data_dir) / "mail").glob("reminder_*.eml"))
        assert len(mails) == 4
        rows = await resources.store.fetchall("SELECT state FROM mail_sends")
        assert [r[0] for r in rows] == ["sent"] * 4
        assert withheld("over_budget") - before == 6
        assert await dead_letters(resources) == []  # skipped, not failed


@pytest.mark.topologies("single", "partitioned")  # stops or pauses the one Redis server
async def test_two_budgets_share_one_count_and_both_windows_slide(
    make_config: Callable[..., Config], resources: Resources, redis_server: RedisServer
) -> None:
    config = make_config()
    async with open_resources(config) as other:
        keys = AccountsKeys(resources.keys.prefix)
        one = UserBudget(resources.redis, keys.mail_budget, hourly=3, daily=5)
        two = UserBudget(other.redis, keys.mail_budget, hourly=3, daily=5)
        spent = [await b.spend("u1", f"m{i}") for i, b in enumerate([one, two, one, two])]
        assert spent == [Spent.GRANTED] * 3 + [Spent.HOUR]
        assert await two.spend("u1", "m0") is Spent.GRANTED  # a retry is not counted again
        assert await one.spend("u2", "m9") is Spent.GRANTED  # budgets are per user

        # An hour later (the grants moved 61 minutes back): the hour has room, the day not.
        key = keys.mail_budget("u1")
        await resources.redis.eval(
            "for i, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do"
            " redis.call('ZINCRBY', KEYS[1], -3660000, m) end",
            1,
            key,
        )
        assert [await one.spend("u1", f"n{i}") for i in range(3)] == [
            Spent.GRANTED,
            Spent.GRANTED,
            Spent.DAY,
        ]

        off = UserBudget(resources.redis, keys.mail_budget, hourly=0, daily=0)
        redis_server.stop()
        assert await off.spend("u1", "x") is Spent.GRANTED  # no limit: no Redis needed
        with pytest.raises(BudgetUnavailable) as error:
            await one.spend("u1", "y")
        assert not error.value.permanent  # retried with backoff, never sent unbudgeted


@pytest.mark.topologies("single", "partitioned")  # stops or pauses the one Redis server
async def test_without_redis_a_pause_still_stops_every_replica(
    client: Client,
    resources: Resources,
    redis_server: RedisServer,
    start_runners: Callable[..., Awaitable[list[ReminderRunner]]],
) -> None:
    auth = await _victim(client)
    body = {"cron": "* * * * * *", "timezone": "UTC", "text": "tick"}
    reminder_id = (await (await client.post("/v1/reminders", json=body, headers=auth)).json())["id"]
    # Learning of changes from the stream only (the reload is far away).
    runners = await start_runners(2, reload_seconds=600)
    await asyncio.to_thread(redis_server.stop)
    await wait_for(_fired(resources, reminder_id, 2), timeout=5)
    # No stream to follow: only the firing transaction tells the replicas of the pause.
    token = unsubscribe_token(await load_link_key(resources.store), reminder_id)
    answer = await client.post("/v1/unsubscribe", params={"token": token})
    assert answer.status == 200
    paused_at = utcnow()
    await asyncio.sleep(2.5)
    assert max(await stored.occurrences(resources.store, reminder_id)) <= paused_at
    assert all(r.scheduled == 0 for r in runners)
