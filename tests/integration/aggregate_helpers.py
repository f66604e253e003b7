"""The aggregate the aggregate tests share: the pings of one source (tests.engine_app),
with and without snapshots."""

from __future__ import annotations

from typing import ClassVar

from sluice.app import Aggregate, Conflict, applies
from tests.engine_app import PingAnswered, Pinged


class Pings(Aggregate):
    """The pings of one source: how many, and their notes in order."""

    aggregate: ClassVar[str] = "pings"
    snapshot_every: ClassVar[int] = 0
    count: int = 0
    notes: list[str] = []  # noqa: RUF012 (copied for each aggregate)
    answered: int = 0

    @applies(Pinged)
    def _pinged(self, event: Pinged) -> None:
        self.count += 1
        self.notes.append(event.note)

    @applies(PingAnswered)
    def _answered(self, event: PingAnswered) -> None:
        self.answered += 1

    def ping(self, note: str) -> None:
        self.record(Pinged(source=self.id, note=note))

    def answer_once(self) -> None:
        if self.answered:
            raise Conflict(f"{self.id} was answered")
        self.record(PingAnswered(source=self.id, ping_id="p"))


class SnappedPings(Pings):
    snapshot_every: ClassVar[int] = 5
