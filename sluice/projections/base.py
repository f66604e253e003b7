"""What a projection declares so the live worker and ``sluice replay`` share it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sluice.config import Config
from sluice.events import Event
from sluice.process.resources import Resources
from sluice.store import Tx

# apply(tx, fresh events, table suffix, config): write the effect of events not seen before.
Apply = Callable[[Tx, Sequence[Event], str, Config], Awaitable[None]]
# apply_payloads(tx, payloads, table suffix, config): apply's effect for the stored payloads
# of the projection's event types, for a rebuild (faster when it skips making events):
# one JSON array of them, in no guaranteed order (sluice.history.packed), so only for
# a projection whose effect does not depend on the order of the events of a chunk.
ApplyPayloads = Callable[[Tx, bytes | str, str, Config], Awaitable[None]]
# publish(resources, events): derived state outside the database, idempotent (absolute values).
Publish = Callable[[Resources, Sequence[Event]], Awaitable[None]]


@dataclass(frozen=True)
class EngineProjection:
    """A projection written against the engine: its tables' DDL, its batch ``apply`` (and
    optionally ``apply_payloads`` for a faster rebuild, ``publish`` for state outside
    the database), run live and by ``sluice replay``; declared with
    ``App.engine_projection``."""

    name: str
    aggregates: tuple[str, ...]
    event_types: tuple[str, ...]
    ddl: str  # CREATE statements with {s} after every table and index name
    tables: tuple[str, ...]
    apply: Apply
    apply_payloads: ApplyPayloads | None = None
    publish: Publish | None = None
    # After a rebuild: rewrite derived state outside the database from scratch.
    republish: Callable[[Resources], Awaitable[None]] | None = None

    @property
    def processed_table(self) -> str:
        """The table of the event ids the projection has applied (its dedupe)."""
        return f"{self.name.replace('-', '_')}_processed"

    @property
    def watermark(self) -> str:
        """Position name: every event at or below it is already in the tables."""
        return f"projection:{self.name}"
