"""The events of the ``engine-test`` app."""

from __future__ import annotations

from typing import ClassVar

from sluice.app import Event
from tests.engine_app.app import app


@app.event
class Pinged(Event, frozen=True, kw_only=True, tag=True):
    """A ping from ``source``; ``note`` is free text (a test's marker, or bulk)."""

    aggregate: ClassVar[str] = "pings"
    source: str
    note: str = ""


@app.event
class PingAnswered(Event, frozen=True, kw_only=True, tag=True):
    """The ``pongs`` group answered a ping."""

    aggregate: ClassVar[str] = "pings"
    source: str
    ping_id: str
