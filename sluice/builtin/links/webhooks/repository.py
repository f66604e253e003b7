"""Webhooks, their messages and their delivery attempts, as stored (migration 21).

``webhooks`` holds the secret as given or generated (it must sign, so it is kept;
the API shows it once, at creation). A message is what one call carries: its id is
the ``webhook-id`` header, stable across retries, and ``webhook_message_events``
says which message carries each event for each webhook, so a retried entry resends
the very message (same id, same body) and an entry whose message went out already
sends nothing again. ``webhook_deliveries`` keeps the last ``ATTEMPTS_KEPT``
attempts per webhook; messages older than the deliveries' retention are purged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import msgspec

from sluice.app import Store, Tx, db_time, utcnow

ATTEMPTS_KEPT = 200  # per webhook
ATTEMPTS_SHOWN = 100


class Webhook(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    owner_id: str
    url: str
    events: tuple[str, ...]
    secret: str
    created_at: str


class StoredMessage(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    webhook_id: str
    event_type: str
    body: bytes
    delivered: bool


class DeliveryRow(msgspec.Struct, frozen=True, kw_only=True):
    at: str
    event_type: str
    message_id: str
    attempt: int
    status: int | None
    error: str | None
    duration_ms: float


_HOOK_COLUMNS = "id, owner_id, url, events, secret, created_at"


def _hook(row: Sequence[object]) -> Webhook:
    return Webhook(
        id=str(row[0]),
        owner_id=str(row[1]),
        url=str(row[2]),
        events=tuple(str(row[3]).split()),
        secret=str(row[4]),
        created_at=str(row[5]),
    )


def _marks(n: int) -> str:
    return ", ".join("?" * n)


async def count_of(db: Store | Tx, owner_id: str) -> int:
    row = await db.fetchone("SELECT COUNT(*) FROM webhooks WHERE owner_id = ?", (owner_id,))
    return int(row[0]) if row else 0


async def insert(tx: Tx, hook: Webhook) -> None:
    await tx.execute(
        f"INSERT INTO webhooks ({_HOOK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        (hook.id, hook.owner_id, hook.url, " ".join(hook.events), hook.secret, hook.created_at),
    )


async def of_owner(store: Store, owner_id: str) -> list[Webhook]:
    rows = await store.fetchall(
        f"SELECT {_HOOK_COLUMNS} FROM webhooks WHERE owner_id = ? ORDER BY created_at, id",
        (owner_id,),
    )
    return [_hook(row) for row in rows]


async def of_owners(store: Store, owner_ids: Iterable[str]) -> list[Webhook]:
    owners = sorted(set(owner_ids))
    if not owners:
        return []
    rows = await store.fetchall(
        f"SELECT {_HOOK_COLUMNS} FROM webhooks WHERE owner_id IN ({_marks(len(owners))})",
        owners,
    )
    return [_hook(row) for row in rows]


async def get(store: Store, webhook_id: str, owner_id: str) -> Webhook | None:
    row = await store.fetchone(
        f"SELECT {_HOOK_COLUMNS} FROM webhooks WHERE id = ? AND owner_id = ?",
        (webhook_id, owner_id),
    )
    return None if row is None else _hook(row)


async def delete(store: Store, webhook_id: str, owner_id: str) -> bool:
    """Remove the webhook, its messages and attempts; False when it is not the owner's."""
    async with store.transaction() as tx:
        if not await tx.execute(
            "DELETE FROM webhooks WHERE id = ? AND owner_id = ?", (webhook_id, owner_id)
        ):
            return False
        for table in ("webhook_message_events", "webhook_messages", "webhook_deliveries"):
            await tx.execute(f"DELETE FROM {table} WHERE webhook_id = ?", (webhook_id,))
    return True


async def link_owners(store: Store, codes: Iterable[str]) -> dict[str, str]:
    """The owner of each link code that exists."""
    unique = sorted(set(codes))
    if not unique:
        return {}
    rows = await store.fetchall(
        f"SELECT code, owner_id FROM links WHERE code IN ({_marks(len(unique))})", unique
    )
    return {str(code): str(owner) for code, owner in rows}


async def assigned(
    store: Store, webhook_id: str, event_ids: Sequence[str]
) -> dict[str, StoredMessage]:
    """The message already made for each of ``event_ids`` to the webhook, by event id."""
    if not event_ids:
        return {}
    rows = await store.fetchall(
        "SELECT e.event_id, m.id, m.event_type, m.body, m.delivered_at"
        " FROM webhook_message_events e JOIN webhook_messages m ON m.id = e.message_id"
        f" WHERE e.webhook_id = ? AND e.event_id IN ({_marks(len(event_ids))})",
        (webhook_id, *event_ids),
    )
    return {
        str(event_id): StoredMessage(
            id=str(mid),
            webhook_id=webhook_id,
            event_type=str(kind),
            body=bytes(body) if not isinstance(body, str) else body.encode(),
            delivered=delivered is not None,
        )
        for event_id, mid, kind, body, delivered in rows
    }


async def save_messages(
    store: Store, messages: Sequence[tuple[StoredMessage, Sequence[str]]]
) -> None:
    """New messages, each with the events it carries, in one transaction."""
    if not messages:
        return
    now = db_time(utcnow())
    async with store.transaction() as tx:
        for message, event_ids in messages:
            await tx.execute(
                "INSERT INTO webhook_messages (id, webhook_id, event_type, body, attempts,"
                " created_at) VALUES (?, ?, ?, ?, 0, ?)",
                (message.id, message.webhook_id, message.event_type, message.body, now),
            )
            await tx.executemany(
                "INSERT INTO webhook_message_events (webhook_id, event_id, message_id, created_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(message.webhook_id, event_id, message.id, now) for event_id in event_ids],
            )


async def is_delivered(store: Store, message_id: str) -> bool:
    row = await store.fetchone(
        "SELECT delivered_at FROM webhook_messages WHERE id = ?", (message_id,)
    )
    return row is not None and row[0] is not None


async def next_attempt(store: Store, message_id: str) -> int:
    async with store.transaction() as tx:
        row = await tx.fetchone(
            "UPDATE webhook_messages SET attempts = attempts + 1 WHERE id = ? RETURNING attempts",
            (message_id,),
        )
    return int(row[0]) if row else 1


async def record(
    store: Store,
    webhook_id: str,
    message: StoredMessage,
    attempt: int,
    status: int | None,
    error: str | None,
    started: datetime,
    duration_ms: float,
) -> None:
    """One attempt; the message marked delivered on a 2xx; older attempts beyond the
    webhook's last ``ATTEMPTS_KEPT`` deleted."""
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO webhook_deliveries (webhook_id, message_id, event_type, attempt, status,"
            " error, started_at, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                webhook_id,
                message.id,
                message.event_type,
                attempt,
                status,
                error,
                db_time(started),
                round(duration_ms, 3),
            ),
        )
        if error is None and status is not None and 200 <= status < 300:
            await tx.execute(
                "UPDATE webhook_messages SET delivered_at = ? WHERE id = ?",
                (db_time(utcnow()), message.id),
            )
        await tx.execute(
            "DELETE FROM webhook_deliveries WHERE webhook_id = ? AND id <= (SELECT id FROM"
            " webhook_deliveries WHERE webhook_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (webhook_id, webhook_id, ATTEMPTS_KEPT),
        )


async def attempts(store: Store, webhook_id: str, limit: int) -> list[DeliveryRow]:
    rows = await store.fetchall(
        "SELECT started_at, event_type, message_id, attempt, status, error, duration_ms"
        " FROM webhook_deliveries WHERE webhook_id = ? ORDER BY id DESC LIMIT ?",
        (webhook_id, limit),
    )
    return [
        DeliveryRow(
            at=str(r[0]),
            event_type=str(r[1]),
            message_id=str(r[2]),
            attempt=int(r[3]),
            status=None if r[4] is None else int(r[4]),
            error=r[5],
            duration_ms=float(r[6]),
        )
        for r in rows
    ]


async def purge_messages(store: Store, now: datetime, retention_s: int) -> int:
    """Messages (and their event rows) older than ``retention_s``; how many went."""
    cutoff = db_time(now - timedelta(seconds=retention_s))
    async with store.transaction() as tx:
        await tx.execute("DELETE FROM webhook_message_events WHERE created_at < ?", (cutoff,))
        return await tx.execute("DELETE FROM webhook_messages WHERE created_at < ?", (cutoff,))
