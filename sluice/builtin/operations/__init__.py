"""Operations (docs/guides/operate.md): the operator's routes (admin token) over what the core
records: event search, an event's and a trace's story with their deliveries, dead letters and
stalled consumers, pausing and cancelling, the groups' per-minute history, and the ``/admin`` page
that shows them.

Declared on ``sluice.app`` like any app; it imports sluice's core and no other app.
"""

from __future__ import annotations

from sluice.builtin.operations import declare  # noqa: F401  (declare)
from sluice.builtin.operations.app import app

__all__ = ["app"]
