"""Reminders through the API, for the tests of reminders: one created, patched, read back,
and the unsubscribe URL of its mail."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sluice.builtin.accounts.http.keys import MAIL_LINK_KEY
from sluice.builtin.accounts.mail.links import unsubscribe_token
from tests.api.helpers import Client


def body(**fields: Any) -> dict[str, Any]:
    return {"cron": "0 30 8 * * MON-FRI", "timezone": "Europe/Berlin", "text": "stand-up"} | fields


async def create(client: Client, auth: dict[str, str], **fields: Any) -> dict[str, Any]:
    response = await client.post("/v1/reminders", json=body(**fields), headers=auth)
    assert response.status == 201, await response.text()
    reminder: dict[str, Any] = await response.json()
    return reminder


def instant(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text)


async def patch(client: Client, auth: dict[str, str], reminder_id: str, **fields: Any) -> Any:
    return await client.patch(f"/v1/reminders/{reminder_id}", json=fields, headers=auth)


async def patched(client: Client, auth: dict[str, str], reminder_id: str, **fields: Any) -> Any:
    response = await patch(client, auth, reminder_id, **fields)
    assert response.status == 200, await response.text()
    return await response.json()


async def read(client: Client, auth: dict[str, str], reminder_id: str) -> Any:
    response = await client.get(f"/v1/reminders/{reminder_id}", headers=auth)
    assert response.status == 200, await response.text()
    return await response.json()


ONE_CLICK = {"List-Unsubscribe": "One-Click"}


async def url_of(client: Client, reminder_id: str) -> str:
    assert client.app is not None
    token = unsubscribe_token(await client.app[MAIL_LINK_KEY].get(), reminder_id)
    return f"/v1/unsubscribe?token={token}"
