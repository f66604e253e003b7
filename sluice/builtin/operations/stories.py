"""The story of an event and of a request (docs/guides/operate.md): an event with every delivery of
it to every group, and a trace's events in commit order, each with its deliveries.

Events come from the hot history (by ``event_id``'s unique index, or the
``events_trace`` index of migration 15); their deliveries from
``sluice.records.deliveries`` (the ``deliveries_event`` index). An event a
handler appends while it handles a delivery carries that delivery's trace id
(``sluice.events.TRACE``), so a trace holds the request's events and the ones its
handlers appended in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from sluice.app.advanced import (
    COLUMNS,
    DeliveryView,
    FoundEvent,
    SavedVersion,
    deliveries,
    event_search,
    found,
)

if TYPE_CHECKING:
    from sluice.app import Row, Store

TRACE_EVENTS_MAX = 1_000
# A trace's page in the team's tracing UI by its id, or None (no SLUICE_TRACE_URL).
TraceLink = Callable[[str], str | None]


class StreamEntry(msgspec.Struct, frozen=True):
    """Where a delivery read the event: its aggregate stream, or a group's retry stream."""

    stream: str
    entry_id: str


class EventStory(FoundEvent, frozen=True):
    """The event as the search finds it, then its stream entries and deliveries."""

    stream_entries: list[StreamEntry]
    deliveries: list[DeliveryView]
    # Saved by an event-sourced aggregate: its version (one event's story only).
    saved: SavedVersion | None = None
    # The event's trace in the team's tracing UI (SLUICE_TRACE_URL); null when unset.
    trace_url: str | None = None


class TraceStory(msgspec.Struct, frozen=True):
    """``events`` in commit order; ``truncated`` when the trace holds more than
    ``TRACE_EVENTS_MAX`` (the first ones are shown)."""

    trace_id: str
    events: list[EventStory]
    truncated: bool
    # The trace in the team's tracing UI (SLUICE_TRACE_URL); null when unset.
    trace_url: str | None = None


def _story(row: Row, attempts: list[DeliveryView], trace_url: TraceLink) -> EventStory:
    entries = dict.fromkeys((a.stream, a.entry_id) for a in attempts)
    return EventStory(
        **msgspec.structs.asdict(found(row)),
        stream_entries=[StreamEntry(stream, entry) for stream, entry in entries],
        deliveries=attempts,
        trace_url=trace_url(str(row[4])),
    )


def _unlinked(trace_id: str) -> None:
    return None


async def event_story(
    store: Store, event_id: str, processed: Sequence[str], trace_url: TraceLink = _unlinked
) -> EventStory | None:
    """The event and its deliveries; None when the hot history does not hold it.
    ``processed``: the projections' processed tables (``deliveries.of_events``);
    ``trace_url``: a trace's page in the tracing UI, by its id."""
    row = await store.fetchone(f"SELECT {COLUMNS} FROM events WHERE event_id = ?", (event_id,))
    if row is None:
        return None
    found = await deliveries.of_events(store, [event_id], processed)
    story = _story(row, found[event_id], trace_url)
    saved = await event_search.saved_version(store, event_id)
    return story if saved is None else msgspec.structs.replace(story, saved=saved)


async def trace_story(
    store: Store, trace_id: str, processed: Sequence[str], trace_url: TraceLink = _unlinked
) -> TraceStory:
    """Every event of the trace in the hot history, oldest first, with its deliveries."""
    rows = await store.fetchall(
        f"SELECT {COLUMNS} FROM events WHERE trace_id = ? ORDER BY created_at, seq LIMIT ?",
        (trace_id, TRACE_EVENTS_MAX + 1),
    )
    shown = sorted(rows[:TRACE_EVENTS_MAX], key=lambda row: int(row[0]))
    found = await deliveries.of_events(store, [str(row[1]) for row in shown], processed)
    return TraceStory(
        trace_id=trace_id,
        events=[_story(row, found[str(row[1])], trace_url) for row in shown],
        truncated=len(rows) > TRACE_EVENTS_MAX,
        trace_url=trace_url(trace_id),
    )
