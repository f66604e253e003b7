"""PATCH /v1/reminders/{id} and GET of one reminder: each field, owner only, validation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from sluice.builtin.reminders import stored
from sluice.builtin.reminders.events import ReminderUpdated
from sluice.builtin.reminders.stored import Fired
from sluice.events import utcnow
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events, user_token
from tests.api.reminder_helpers import ONE_CLICK, create, instant, patch, patched, read, url_of


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


@pytest.fixture
async def bob(client: Client) -> dict[str, str]:
    return await user_token(client, email="bob@example.org")


async def updates(store: Store) -> list[ReminderUpdated]:
    return [e for e, _ in await stored_events(store) if isinstance(e, ReminderUpdated)]


async def test_text_changes_and_every_scheduler_is_told(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    reminder = await create(client, ada)
    answer = await patched(client, ada, reminder["id"], text="retro")
    assert answer["text"] == "retro" and answer["cron"] == reminder["cron"]
    assert answer["next_runs"] == reminder["next_runs"]  # the schedule did not change
    assert (await read(client, ada, reminder["id"]))["text"] == "retro"
    [event] = await updates(store)
    assert (event.reminder_id, event.text, event.cron, event.paused) == (
        reminder["id"],
        "retro",
        "0 30 8 * * MON-FRI",
        False,
    )


async def test_a_new_cron_answers_its_next_runs(client: Client, ada: dict[str, str]) -> None:
    reminder = await create(client, ada)
    answer = await patched(client, ada, reminder["id"], cron="0  0 12 * * SAT")
    assert answer["cron"] == "0 0 12 * * SAT"
    runs = [instant(r).astimezone(ZoneInfo("Europe/Berlin")) for r in answer["next_runs"]]
    assert len(runs) == 3 and all((r.weekday(), r.hour, r.minute) == (5, 12, 0) for r in runs)
    # The stored window is the new schedule's: a list shows the same runs.
    listed = (await (await client.get("/v1/reminders", headers=ada)).json())["items"]
    assert listed[0]["next_runs"] == answer["next_runs"]


async def test_a_new_timezone_moves_the_runs(client: Client, ada: dict[str, str]) -> None:
    reminder = await create(client, ada, cron="0 0 9 * * *", timezone="UTC")
    answer = await patched(client, ada, reminder["id"], timezone="Asia/Tokyo")
    assert answer["timezone"] == "Asia/Tokyo"
    assert {instant(r).hour for r in answer["next_runs"]} == {0}  # 09:00 in Tokyo


async def test_paused_stops_and_resumes_firing(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    reminder = await create(client, ada)
    paused = await patched(client, ada, reminder["id"], paused=True)
    assert (paused["status"], paused["next_runs"]) == ("paused", [])
    assert (await read(client, ada, reminder["id"]))["status"] == "paused"
    resumed = await patched(client, ada, reminder["id"], paused=False)
    assert resumed["status"] == "active" and len(resumed["next_runs"]) == 3
    assert [e.paused for e in await updates(store)] == [True, False]


async def test_a_reminder_paused_by_unsubscribe_resumes_with_patch(
    client: Client, ada: dict[str, str]
) -> None:
    reminder = await create(client, ada)
    assert (await client.post(await url_of(client, reminder["id"]), data=ONE_CLICK)).status == 200
    assert (await read(client, ada, reminder["id"]))["status"] == "paused"
    assert (await patched(client, ada, reminder["id"], paused=False))["status"] == "active"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "0 0 12 ? * *"}, "cron"),  # Quartz
        ({"cron": "* * * * * *"}, "cron"),  # closer than the minimum interval
        ({"cron": ""}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"text": " \u200b "}, "text"),
        ({"text": "x" * 1001}, "text"),
        ({"at": "2030-01-01T00:00:00Z"}, "at"),  # a cron reminder has no instant
        ({"colour": "red"}, "colour"),  # unknown
        ({"text": "ok", "colour": "red"}, "colour"),
        ({}, "body"),
        ({"text": None}, "body"),
    ],
)
async def test_bad_values_are_422_and_change_nothing(
    client: Client, store: Store, ada: dict[str, str], fields: dict[str, Any], field: str
) -> None:
    reminder = await create(client, ada)
    answer = await problem(await patch(client, ada, reminder["id"], **fields), 422)
    assert field in {e["field"] for e in answer["errors"]}
    assert await read(client, ada, reminder["id"]) == reminder
    assert await updates(store) == []


async def test_an_empty_body_is_422_and_a_wrong_type_400(
    client: Client, ada: dict[str, str]
) -> None:
    reminder = await create(client, ada)
    path = f"/v1/reminders/{reminder['id']}"
    await problem(await client.patch(path, headers=ada), 422)
    await problem(await patch(client, ada, reminder["id"], paused="yes"), 400)


async def test_only_the_owner_reads_and_changes_it(
    client: Client, store: Store, ada: dict[str, str], bob: dict[str, str]
) -> None:
    reminder = await create(client, ada)
    await problem(await patch(client, bob, reminder["id"], text="mine now"), 404)
    await problem(await client.get(f"/v1/reminders/{reminder['id']}", headers=bob), 404)
    await problem(await patch(client, ada, "no-such-id", text="x"), 404)
    await problem(await client.patch("/v1/reminders/x", json={"text": "x"}), 401)
    assert (await client.delete(f"/v1/reminders/{reminder['id']}", headers=ada)).status == 204
    await problem(await patch(client, ada, reminder["id"], text="back"), 404)
    await problem(await client.get(f"/v1/reminders/{reminder['id']}", headers=ada), 404)
    assert await updates(store) == []


async def test_an_occurrence_fires_only_from_the_schedule_stored_when_it_commits(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    """Fired before the PATCH: once. After it: nothing of the old schedule, and nothing
    of the new one from before the change (what a scheduler still holding the old plan,
    or catching up, would try)."""
    reminder = await create(client, ada, cron="0 * * * * *", timezone="UTC")
    old, new = ("0 * * * * *", "UTC"), ("30 * * * * *", "UTC")
    created = instant(reminder["created_at"])
    slot = created.replace(second=0, microsecond=0) + timedelta(minutes=1)
    fire = stored.fire_many
    assert await fire(store, [(reminder["id"], slot, "t1", old)], slot) == [Fired.FIRED]
    changed = await patched(client, ada, reminder["id"], cron="30 * * * * *")
    later = slot + timedelta(minutes=1)
    assert await fire(store, [(reminder["id"], later, "t2", old)], later) == [Fired.CHANGED]
    since = instant(changed["next_runs"][0]) - timedelta(minutes=1)  # before the PATCH
    assert since < utcnow()
    assert await fire(store, [(reminder["id"], since, "t3", new)], later) == [Fired.CHANGED]
    first = instant(changed["next_runs"][0])
    assert await fire(store, [(reminder["id"], first, "t4", new)], first) == [Fired.FIRED]
    assert await stored.occurrences(store, reminder["id"]) == sorted([slot, first])
