"""What the engine runs of a projection, so the live worker and ``sluice replay`` share
it: made from an app's ``App.projection`` by ``sluice.app.running.engine_projection``.
Its functions take what they handle first, as the app's do."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sluice.config import Config
from sluice.events import Event
from sluice.process.resources import Resources
from sluice.store import Tx

# apply(fresh events, tx, table suffix, config): write the effect of events not seen before.
Apply = Callable[[Sequence[Event], Tx, str, Config], Awaitable[None]]
# apply_payloads(payloads, tx, table suffix, config): apply's effect for the stored payloads
# of the projection's event types, for a rebuild (faster when it skips making events):
# one JSON array of them, in no guaranteed order (sluice.history.packed), so only for
# a projection whose effect does not depend on the order of the events of a chunk.
ApplyPayloads = Callable[[bytes | str, Tx, str, Config], Awaitable[None]]
# publish(events, resources): derived state outside the database, idempotent (absolute values).
Publish = Callable[[Sequence[Event], Resources], Awaitable[None]]


@dataclass(frozen=True)
class EngineProjection:
    """A projection as the engine runs it: its tables' DDL, its batch ``apply`` (and
    optionally ``apply_payloads`` for a faster rebuild, ``publish`` for state outside
    the database), run live and by ``sluice replay``."""

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
