"""Reminders through the API as a user makes them, and what their runners fired, read back
from the store and Redis."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from aiohttp.test_utils import TestClient

from sluice.builtin.accounts.mail.links import load_link_key, verify_token
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.events import ReminderDeleted, ReminderDue
from sluice.events import decode, utcnow
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from sluice.store.users import from_db_time

Client = TestClient[Any, Any]

SECOND = timedelta(seconds=1)


async def verify_address(client: Client, auth: dict[str, str], resources: Resources) -> None:
    """Follow a verification link as the welcome mail's (reminders mail verified addresses)."""
    me = await (await client.get("/v1/me", headers=auth)).json()
    key = await load_link_key(resources.store)
    token = verify_token(key, me["id"], me["email"], utcnow() + timedelta(days=1))
    response = await client.post("/v1/users/verify", json={"token": token})
    assert response.status == 200, await response.text()


async def create(client: Client, auth: dict[str, str], cron: str, text: str) -> str:
    body = {"cron": cron, "timezone": "Europe/Berlin", "text": text}
    response = await client.post("/v1/reminders", json=body, headers=auth)
    assert response.status == 201, await response.text()
    reminder_id: str = (await response.json())["id"]
    return reminder_id


async def delete(client: Client, auth: dict[str, str], reminder_id: str) -> datetime:
    """Delete; the instant the deletion had surely committed."""
    assert (await client.delete(f"/v1/reminders/{reminder_id}", headers=auth)).status == 204
    return utcnow()


async def due_events(resources: Resources, reminder_id: str) -> list[ReminderDue]:
    events = await resources.store.events_after(0, 100_000, types=["ReminderDue"])
    decoded = [decode(e.payload) for e in events]
    return [e for e in decoded if isinstance(e, ReminderDue) and e.reminder_id == reminder_id]


def fired_at_least(
    resources: Resources, reminder_id: str, count: int
) -> Callable[[], Awaitable[bool]]:
    async def enough() -> bool:
        return len(await stored.occurrences(resources.store, reminder_id)) >= count

    return enough


async def assert_once_each(resources: Resources, reminder_id: str, step: int) -> list[datetime]:
    """One row and one ReminderDue per slot; slots ``step`` seconds apart, none missing."""
    slots = await stored.occurrences(resources.store, reminder_id)
    assert len(slots) == len(set(slots))
    assert {b - a for a, b in pairwise(slots)} <= {step * SECOND}
    due = sorted(e.scheduled_for for e in await due_events(resources, reminder_id))
    assert due == slots
    return slots


async def assert_none_fired_after_deletion(
    resources: Resources, reminder_id: str, deleted_at: datetime
) -> None:
    """Every occurrence of a deleted reminder fired before its deletion committed: its
    ``fired_at`` (when a runner fired it) is before the DELETE answered, and its
    ``ReminderDue`` comes before ``ReminderDeleted`` in the history, which orders commits.
    (Slot times prove neither: an occurrence may fire late, after catch-up or a stall.)"""
    rows = await resources.store.fetchall(
        "SELECT fired_at FROM reminder_occurrences WHERE reminder_id = ?", (reminder_id,)
    )
    fired = [from_db_time(row[0]) for row in rows]
    assert fired, "the reminder never fired before its deletion"
    assert max(fired) < deleted_at, "an occurrence fired after the deletion answered"
    history = await resources.store.events_after(
        0, 100_000, types=["ReminderDue", "ReminderDeleted"]
    )
    events = [(row.seq, decode(row.payload)) for row in history]
    due = [s for s, e in events if isinstance(e, ReminderDue) and e.reminder_id == reminder_id]
    [deleted] = [
        s for s, e in events if isinstance(e, ReminderDeleted) and e.reminder_id == reminder_id
    ]
    assert len(due) == len(fired) and max(due) < deleted, "a ReminderDue after the deletion"


def drained(resources: Resources) -> Callable[[], Awaitable[bool]]:
    """Every event published, and the mail group has read and acked all of the reminders,
    in every partition's stream that holds any."""

    async def caught_up(stream: str) -> bool:
        info = await resources.redis.xinfo_stream(stream)
        for group in await resources.redis.xinfo_groups(stream):
            if group["name"] in (b"mail", "mail"):
                read = group["last-delivered-id"] == info["last-generated-id"]
                return read and int(group["pending"]) == 0
        return False

    async def done() -> bool:
        if await resources.store.position(POSITION) < await resources.store.max_seq():
            return False
        keys = resources.keys
        streams = [keys.stream("reminders", p) for p in keys.numbers]
        present = [s for s in streams if await resources.redis.exists(s)]
        return bool(present) and all([await caught_up(s) for s in present])

    return done
