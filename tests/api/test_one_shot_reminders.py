"""One-shot reminders ``{at, text}`` (docs/guides/tasks.md): validation, listing, ``done`` after
firing.

Firing is ``sluice.builtin.reminders.one_shots.fire_due``, what every scheduler replica
calls; here with a clock of the test's choosing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from sluice.builtin.reminders.events import ReminderCreated, ReminderDue, ReminderUpdated
from sluice.builtin.reminders.http import reminders as reminder_views
from sluice.builtin.reminders.one_shots import fire_due, next_due
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events, user_token
from tests.api.reminder_helpers import create, instant, patch, patched, read

ZONE = ZoneInfo("America/New_York")


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


def soon(**delta: float) -> datetime:
    return (datetime.now(UTC) + timedelta(**delta)).replace(microsecond=0)


async def one_shot(
    client: Client, auth: dict[str, str], at: datetime, text: str = "close order 42"
) -> dict[str, Any]:
    body = {"at": at.isoformat(), "text": text}
    response = await client.post("/v1/reminders", json=body, headers=auth)
    assert response.status == 201, await response.text()
    reminder: dict[str, Any] = await response.json()
    assert response.headers["Location"] == f"/v1/reminders/{reminder['id']}"
    return reminder


async def due_events(store: Store, reminder_id: str) -> list[ReminderDue]:
    return [
        e
        for e, _ in await stored_events(store)
        if isinstance(e, ReminderDue) and e.reminder_id == reminder_id
    ]


async def test_a_one_shot_shows_its_instant_and_no_cron(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    at = soon(minutes=15).astimezone(ZONE)  # an offset other than Z comes back in UTC
    reminder = await one_shot(client, ada, at)
    assert (reminder["cron"], reminder["timezone"], reminder["status"]) == (None, None, "active")
    assert instant(reminder["at"]) == at and reminder["next_runs"] == [reminder["at"]]
    assert await read(client, ada, reminder["id"]) == reminder
    listed = (await (await client.get("/v1/reminders", headers=ada)).json())["items"]
    assert listed == [reminder]
    [created] = [e for e, _ in await stored_events(store) if isinstance(e, ReminderCreated)]
    assert (created.at, created.cron, created.text) == (at, "", "close order 42")
    assert await next_due(store) == at


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"at": "2031-01-01T00:00:00", "text": "x"}, "at"),  # no offset
        ({"at": "tomorrow", "text": "x"}, "at"),
        ({"at": "2020-01-01T00:00:00Z", "text": "x"}, "at"),  # past
        ({"at": "+400 days", "text": "x"}, "at"),  # over a year ahead
        ({"at": "+1 hour"}, "text"),
        ({"at": "+1 hour", "text": "x", "cron": "0 0 9 * * *"}, "cron"),  # both shapes
        ({"at": "+1 hour", "text": "x", "timezone": "UTC"}, "timezone"),
    ],
)
async def test_bad_one_shots_are_422(
    client: Client, store: Store, ada: dict[str, str], fields: dict[str, Any], field: str
) -> None:
    if fields["at"] == "+400 days":
        fields["at"] = soon(days=400).isoformat()
    elif fields["at"] == "+1 hour":
        fields["at"] = soon(hours=1).isoformat()
    answer = await problem(await client.post("/v1/reminders", json=fields, headers=ada), 422)
    assert field in {e["field"] for e in answer["errors"]}
    assert (await (await client.get("/v1/reminders", headers=ada)).json())["items"] == []


async def test_a_year_ahead_is_accepted(client: Client, ada: dict[str, str]) -> None:
    await one_shot(client, ada, soon(days=364))


async def test_it_fires_once_then_reads_done_and_cannot_change(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    at = soon(minutes=5)
    reminder = await one_shot(client, ada, at)
    assert await fire_due(store, at - timedelta(seconds=1), 100) == []  # not yet
    [due] = await fire_due(store, at, 100)
    assert (due.reminder_id, due.scheduled_for, due.text) == (reminder["id"], at, "close order 42")
    assert due.email == "ada@example.org"
    assert await fire_due(store, at + timedelta(hours=1), 100) == []  # never again
    assert len(await due_events(store, reminder["id"])) == 1
    done = await read(client, ada, reminder["id"])
    assert (done["status"], done["next_runs"], done["at"]) == ("done", [], reminder["at"])
    await problem(await patch(client, ada, reminder["id"], text="late"), 409)
    assert await next_due(store) is None


async def test_patch_moves_renames_pauses_and_resumes_a_pending_one(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    at, moved = soon(minutes=5), soon(minutes=10)
    reminder = await one_shot(client, ada, at)
    answer = await patched(client, ada, reminder["id"], at=moved.isoformat(), text="renamed")
    assert (instant(answer["at"]), answer["text"], answer["next_runs"]) == (
        moved,
        "renamed",
        [answer["at"]],
    )
    assert await fire_due(store, at + timedelta(seconds=1), 100) == []  # the old instant
    paused = await patched(client, ada, reminder["id"], paused=True)
    assert (paused["status"], paused["next_runs"]) == ("paused", [])
    assert await fire_due(store, moved + timedelta(seconds=1), 100) == []
    await patched(client, ada, reminder["id"], paused=False)
    [due] = await fire_due(store, moved + timedelta(seconds=1), 100)
    assert (due.scheduled_for, due.text) == (moved, "renamed")
    events = [e for e, _ in await stored_events(store) if isinstance(e, ReminderUpdated)]
    assert [(e.at, e.paused) for e in events] == [(moved, False), (moved, True), (moved, False)]


async def test_a_one_shot_takes_no_cron_and_a_past_at_is_422(
    client: Client, ada: dict[str, str]
) -> None:
    reminder = await one_shot(client, ada, soon(minutes=5))
    for fields, field in (
        ({"cron": "0 0 9 * * *"}, "cron"),
        ({"timezone": "UTC"}, "timezone"),
        ({"at": "2020-01-01T00:00:00Z"}, "at"),
    ):
        answer = await problem(await patch(client, ada, reminder["id"], **fields), 422)
        assert [e["field"] for e in answer["errors"]] == [field]
    assert await read(client, ada, reminder["id"]) == reminder


async def test_a_deleted_one_shot_does_not_fire(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    at = soon(minutes=5)
    reminder = await one_shot(client, ada, at)
    assert (await client.delete(f"/v1/reminders/{reminder['id']}", headers=ada)).status == 204
    assert await fire_due(store, at + timedelta(seconds=1), 100) == []
    assert await next_due(store) is None


async def test_fire_due_takes_the_earliest_first_and_at_most_the_limit(
    client: Client, store: Store, ada: dict[str, str]
) -> None:
    base = soon(minutes=5)
    ids = [(await one_shot(client, ada, base + timedelta(seconds=s)))["id"] for s in (3, 1, 2)]
    first = await fire_due(store, base + timedelta(seconds=5), 2)
    assert [e.reminder_id for e in first] == [ids[1], ids[2]]
    [last] = await fire_due(store, base + timedelta(seconds=5), 2)
    assert last.reminder_id == ids[0]


async def test_pending_one_shots_per_user_are_capped_apart_from_cron_reminders(
    client: Client, store: Store, ada: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reminder_views, "PENDING_MAX", 2)
    monkeypatch.setattr(reminder_views, "ACTIVE_MAX", 1)
    at = soon(minutes=5)
    await one_shot(client, ada, at)
    await one_shot(client, ada, at)
    body = {"at": at.isoformat(), "text": "third"}
    answer = await problem(await client.post("/v1/reminders", json=body, headers=ada), 422)
    assert "2" in answer["errors"][0]["message"]
    await create(client, ada)  # one-shots do not count against cron reminders
    await fire_due(store, at, 100)
    await one_shot(client, ada, soon(minutes=6))  # fired ones free their place
