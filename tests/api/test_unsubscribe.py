"""The one-click unsubscribe of reminder mails (RFC 8058): a signed POST pauses the reminder."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.builtin.accounts.mail.links import unsubscribe_token
from sluice.builtin.reminders.events import ReminderUpdated
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events, user_token
from tests.api.reminder_helpers import ONE_CLICK, create, url_of


@pytest.fixture
async def ada(client: Client) -> dict[str, str]:
    return await user_token(client)


async def listed(client: Client, auth: dict[str, str]) -> dict[str, Any]:
    response = await client.get("/v1/reminders", headers=auth)
    assert response.status == 200
    return {r["id"]: r for r in (await response.json())["items"]}


async def updates(store: Store) -> list[ReminderUpdated]:
    return [e for e, _ in await stored_events(store) if isinstance(e, ReminderUpdated)]


async def test_the_one_click_post_pauses_the_reminder_without_a_sign_in(
    client: Client, ada: dict[str, str], store: Store
) -> None:
    reminder = await create(client, ada)
    other = await create(client, ada, text="keep me")
    assert (await listed(client, ada))[reminder["id"]]["status"] == "active"
    url = await url_of(client, reminder["id"])

    answer = await client.post(url, data=ONE_CLICK)  # as a mail provider sends it
    assert answer.status == 200
    assert "paused" in await answer.text()
    mine = await listed(client, ada)
    assert mine[reminder["id"]]["status"] == "paused"
    assert mine[reminder["id"]]["next_runs"] == []  # it does not fire
    assert mine[other["id"]]["status"] == "active" and len(mine[other["id"]]["next_runs"]) == 3
    [event] = await updates(store)
    assert (event.reminder_id, event.paused, event.text) == (reminder["id"], True, "stand-up")

    again = await client.post(url)  # twice, or with no body: the same answer, no new event
    assert again.status == 200
    assert len(await updates(store)) == 1


async def test_the_link_shows_a_page_whose_button_pauses_and_the_get_changes_nothing(
    client: Client, ada: dict[str, str], store: Store
) -> None:
    reminder = await create(client, ada, text="<b>water</b> the plants")
    url = await url_of(client, reminder["id"])
    page = await client.get(url)
    assert page.status == 200
    assert page.content_type == "text/html"
    html = await page.text()
    assert '<form method="post">' in html  # posts to the link itself
    assert '<input type="hidden" name="List-Unsubscribe" value="One-Click">' in html
    assert "&lt;b&gt;water&lt;/b&gt; the plants" in html and "<b>" not in html
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert (await listed(client, ada))[reminder["id"]]["status"] == "active"
    assert await updates(store) == []

    assert (await client.post(url, data=ONE_CLICK)).status == 200
    paused_page = await client.get(url)
    assert "is paused" in await paused_page.text() and "<form" not in await paused_page.text()


async def test_a_deleted_reminder_answers_that_it_sends_nothing(
    client: Client, ada: dict[str, str], store: Store
) -> None:
    reminder = await create(client, ada)
    url = await url_of(client, reminder["id"])
    assert (await client.delete(f"/v1/reminders/{reminder['id']}", headers=ada)).status == 204
    for answer in (await client.get(url), await client.post(url, data=ONE_CLICK)):
        assert answer.status == 200
        assert "was deleted" in await answer.text()
    assert await updates(store) == []


async def test_forged_links_are_422_and_pause_nothing(
    client: Client, ada: dict[str, str], store: Store
) -> None:
    reminder = await create(client, ada)
    genuine = (await url_of(client, reminder["id"])).partition("token=")[2]
    other_last = "0" if reminder["id"][-1] != "0" else "1"  # another reminder's id
    forged = [
        unsubscribe_token(b"a key of my own", reminder["id"]),
        genuine.replace(reminder["id"], reminder["id"][:-1] + other_last),
        genuine[:-2],
        "",
    ]
    for token in forged:
        await problem(await client.post("/v1/unsubscribe", params={"token": token}), 422)
        await problem(await client.get("/v1/unsubscribe", params={"token": token}), 422)
    await problem(await client.post("/v1/unsubscribe", data=ONE_CLICK), 422)
    unknown = await url_of(client, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
    await problem(await client.post(unknown, data=ONE_CLICK), 404)
    assert (await listed(client, ada))[reminder["id"]]["status"] == "active"
    assert await updates(store) == []
