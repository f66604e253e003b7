"""What a webhook receives: ``{type, version, data}`` JSON, one message per link change
and one per batch of up to ``VISITS_PER_MESSAGE`` visits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from sluice.app import Event
from sluice.builtin.links.events import LinkCreated, LinkUpdated, LinkVisited

VERSION = 1
VISITS_PER_MESSAGE = 100
EVENT_TYPES: dict[type[Event], str] = {
    LinkCreated: "link.created",
    LinkUpdated: "link.updated",
    LinkVisited: "link.visited",
}
TYPES: tuple[str, ...] = tuple(EVENT_TYPES.values())

_encoder = msgspec.json.Encoder()


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _link(event: LinkCreated | LinkUpdated) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "occurred_at": _when(event.occurred_at),
        "code": event.code,
        "url": event.url,
        "expires_at": _when(event.expires_at),
        "disabled": event.disabled,
    }


def _visit(event: LinkVisited) -> dict[str, Any]:
    # The visitor's keyed hash is left out: receivers get no pseudonymous trail.
    return {
        "event_id": event.event_id,
        "occurred_at": _when(event.occurred_at),
        "code": event.code,
        "referrer_host": event.referrer_host,
        "browser": event.browser,
        "is_bot": event.is_bot,
        "country": event.country,
        "os": event.os,
        "device": event.device,
    }


def body(kind: str, data: dict[str, Any]) -> bytes:
    return _encoder.encode({"type": kind, "version": VERSION, "data": data})


def compose(events: Sequence[Event]) -> list[tuple[str, bytes, list[str]]]:
    """The messages carrying ``events`` (in order): (type, body, event ids) each."""
    messages: list[tuple[str, bytes, list[str]]] = []
    visits = [e for e in events if isinstance(e, LinkVisited)]
    for event in events:
        if isinstance(event, LinkCreated | LinkUpdated):
            kind = EVENT_TYPES[type(event)]
            messages.append((kind, body(kind, _link(event)), [event.event_id]))
    for start in range(0, len(visits), VISITS_PER_MESSAGE):
        chunk = visits[start : start + VISITS_PER_MESSAGE]
        data = {"visits": [_visit(v) for v in chunk]}
        messages.append(("link.visited", body("link.visited", data), [v.event_id for v in chunk]))
    return messages
