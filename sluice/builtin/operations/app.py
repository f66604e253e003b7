"""The ``operations`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App
from sluice.builtin.operations.settings import OperationsSettings

app = App(
    "operations",
    description="what an operator asks of the history and the groups: event search, traces,"
    " deliveries, pauses, cancels, the groups' history and the /admin page",
    settings=OperationsSettings,
)
