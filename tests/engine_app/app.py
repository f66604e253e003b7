"""The ``engine-test`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App

app = App("engine-test", description="pings for the engine's tests")
app.aggregate("pings", key="source")
