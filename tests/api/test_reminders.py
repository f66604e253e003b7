"""The reminders API: validation with reasons, next runs, owner-only listing and deletion."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from sluice.app.assembly import create_app
from sluice.builtin.reminders.events import ReminderCreated, ReminderDeleted
from sluice.builtin.reminders.http import reminders as reminder_views
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events, user_token
from tests.api.reminder_helpers import body, create, instant

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


@pytest.fixture
async def bob(client: Client) -> dict[str, str]:
    return await user_token(client, email="bob@example.org")


async def reminder_events(store: Store) -> list[tuple[Any, str]]:
    kinds = ReminderCreated | ReminderDeleted
    return [(e, t) for e, t in await stored_events(store) if isinstance(e, kinds)]


async def test_a_rare_schedule_is_accepted_with_its_next_runs(
    client: Client, ada: dict[str, str]
) -> None:
    reminder = await create(client, ada, cron="0 0 0 29 2 */7", timezone="UTC")  # leap Sundays
    assert [instant(t).year for t in reminder["next_runs"]] == [2032, 2060, 2088]


async def test_a_reminder_answers_its_next_three_runs_in_its_zone(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    before = datetime.now(UTC)
    response = await client.post(
        "/v1/reminders", json=body(cron="0  30 8 * * mon-fri"), headers=ada
    )
    assert response.status == 201, await response.text()
    reminder = await response.json()
    assert set(reminder) == {
        "id",
        "cron",
        "timezone",
        "at",
        "text",
        "next_runs",
        "created_at",
        "status",
    }
    assert reminder["status"] == "active" and reminder["at"] is None
    assert (reminder["cron"], reminder["timezone"], reminder["text"]) == (
        "0 30 8 * * mon-fri",
        "Europe/Berlin",
        "stand-up",
    )
    assert response.headers["Location"] == f"/v1/reminders/{reminder['id']}"
    runs = [instant(r) for r in reminder["next_runs"]]
    assert len(runs) == 3
    assert before < runs[0] < runs[1] < runs[2]
    for run in runs:
        local = run.astimezone(BERLIN)
        assert (local.hour, local.minute, local.second) == (8, 30, 0)
        assert local.weekday() < 5
    assert before <= instant(reminder["created_at"]) <= runs[0]

    [(event, trace_id)] = await reminder_events(store)
    assert isinstance(event, ReminderCreated)
    assert (event.reminder_id, event.cron, event.timezone, event.text) == (
        reminder["id"],
        "0 30 8 * * mon-fri",
        "Europe/Berlin",
        "stand-up",
    )
    assert trace_id == response.headers["X-Trace-Id"]


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"cron": "0 0 12 ? * MON"}, "cron", ["Quartz", "'?'"]),
        ({"cron": "0 0 12 L * *"}, "cron", ["Quartz", "'L'"]),
        ({"cron": "0 0 12 * * MON 2030"}, "cron", ["seventh"]),
        ({"cron": "0 12 * * *"}, "cron", ["six fields"]),
        ({"cron": "0 61 * * * *"}, "cron", ["out of range", "minute"]),
        ({"cron": "* * * * * *"}, "cron", [" 1 seconds", "60 seconds"]),
        ({"cron": "*/30 * * * * *"}, "cron", [" 30 seconds", "60 seconds"]),
        ({"cron": None}, "cron", ["required"]),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", ["unknown time zone"]),
        ({"timezone": ""}, "timezone", ["required"]),
        ({"text": None}, "text", ["required"]),
        ({"text": "  \n "}, "text", ["blank"]),
        ({"text": "\u200b\u2060\ufeff"}, "text", ["blank"]),  # zero-width, invisible
        ({"text": "x" * 1001}, "text", ["1000"]),
    ],
)
async def test_invalid_reminders_get_422_naming_the_field_and_reason(
    client: Client,
    store: Store,
    ada: dict[str, str],
    fields: dict[str, Any],
    field: str,
    words: list[str],
) -> None:
    sent = {k: v for k, v in body(**fields).items() if v is not None}
    answer = await problem(await client.post("/v1/reminders", json=sent, headers=ada), 422)
    [error] = answer["errors"]
    assert error["field"] == field
    for word in words:
        assert word in error["message"], error["message"]
    assert await reminder_events(store) == []
    listed = await (await client.get("/v1/reminders", headers=ada)).json()
    assert listed == {"items": []}


async def test_every_bad_field_is_named_at_once(client: Client, ada: dict[str, str]) -> None:
    bad = {"cron": "0 0 12 ? * MON", "timezone": "Nowhere/City", "text": ""}
    answer = await problem(await client.post("/v1/reminders", json=bad, headers=ada), 422)
    assert sorted(e["field"] for e in answer["errors"]) == ["cron", "text", "timezone"]


async def test_the_minimum_interval_follows_the_config(
    aiohttp_client: Any, make_config: Any
) -> None:
    client = await aiohttp_client(create_app(make_config(reminder_min_interval=1)))
    auth = await user_token(client)
    reminder = await create(client, auth, cron="* * * * * *", timezone="UTC")
    runs = [instant(r) for r in reminder["next_runs"]]
    assert [(b - a).total_seconds() for a, b in pairwise(runs)] == [1.0, 1.0]


async def test_wrong_types_and_unknown_fields_are_400(client: Client, ada: dict[str, str]) -> None:
    for sent in (body(cron=5), body(text=["a"]), body(when="now")):
        await problem(await client.post("/v1/reminders", json=sent, headers=ada), 400)


async def test_reminders_need_a_token(client: Client, ada: dict[str, str]) -> None:
    reminder = await create(client, ada)
    for response in (
        await client.post("/v1/reminders", json=body()),
        await client.get("/v1/reminders"),
        await client.delete(f"/v1/reminders/{reminder['id']}"),
        await client.get("/v1/reminders", headers={"Authorization": "Bearer nope"}),
    ):
        await problem(response, 401)
    assert len((await (await client.get("/v1/reminders", headers=ada)).json())["items"]) == 1


async def test_each_user_lists_only_their_own_newest_first(
    client: Client, ada: dict[str, str], bob: dict[str, str]
) -> None:
    first = await create(client, ada, text="first")
    second = await create(client, ada, text="second", cron="0 0 9 * * *", timezone="UTC")
    theirs = await create(client, bob, text="bob's")

    mine = (await (await client.get("/v1/reminders", headers=ada)).json())["items"]
    assert [r["id"] for r in mine] == [second["id"], first["id"]]
    assert mine[0]["cron"] == "0 0 9 * * *" and mine[0]["timezone"] == "UTC"
    assert len(mine[0]["next_runs"]) == 3
    assert all(instant(r).hour == 9 for r in mine[0]["next_runs"])
    bobs = (await (await client.get("/v1/reminders", headers=bob)).json())["items"]
    assert [r["id"] for r in bobs] == [theirs["id"]]


async def test_delete_answers_204_then_404_and_another_users_is_404(
    client: Client, store: Store, ada: dict[str, str], bob: dict[str, str]
) -> None:
    reminder = await create(client, ada)
    path = f"/v1/reminders/{reminder['id']}"
    await problem(await client.delete(path, headers=bob), 404)
    await problem(await client.delete("/v1/reminders/no-such-id", headers=ada), 404)

    response = await client.delete(path, headers=ada)
    assert response.status == 204
    await problem(await client.delete(path, headers=ada), 404)
    assert (await (await client.get("/v1/reminders", headers=ada)).json()) == {"items": []}

    created, deleted = [e for e, _ in await reminder_events(store)]
    assert isinstance(created, ReminderCreated) and isinstance(deleted, ReminderDeleted)
    assert deleted.reminder_id == reminder["id"] and deleted.owner_id == created.owner_id
    row = await store.fetchone("SELECT deleted_at FROM reminders WHERE id = ?", (reminder["id"],))
    assert row is not None and row[0] is not None


async def test_active_reminders_per_user_are_capped(
    client: Client, ada: dict[str, str], bob: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reminder_views, "ACTIVE_MAX", 2)
    first = await create(client, ada)
    await create(client, ada)
    answer = await problem(await client.post("/v1/reminders", json=body(), headers=ada), 422)
    assert "2" in answer["errors"][0]["message"]
    await create(client, bob)  # the cap is per user

    assert (await client.delete(f"/v1/reminders/{first['id']}", headers=ada)).status == 204
    await create(client, ada)  # a deleted reminder frees its place
