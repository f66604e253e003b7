"""What the operations app declares on its ``App``: its routes, all behind the admin
token but the ``/admin`` page itself (which asks for the token)."""

from __future__ import annotations

from sluice.builtin.operations.app import app
from sluice.builtin.operations.http import (
    admin,
    dashboard,
    dead_letters,
    events,
    flow,
    history,
    pauses,
)
from sluice.builtin.tags import tagged

app.add_routes(
    tagged(
        (
            *dashboard.ROUTES,
            *admin.ROUTES,
            *dead_letters.ROUTES,
            *pauses.ROUTES,
            *flow.ROUTES,
            *events.ROUTES,
            *history.ROUTES,
        )
    )
)
