"""The ``pongs`` group of the ``engine-test`` app: it answers each ping once."""

from __future__ import annotations

from sluice.app import HandlerContext, Tx
from tests.engine_app.app import app
from tests.engine_app.events import PingAnswered, Pinged

pongs = app.group("pongs")


@pongs.once(Pinged)
async def answer(event: Pinged, tx: Tx, ctx: HandlerContext) -> None:
    await tx.append(PingAnswered(source=event.source, ping_id=event.event_id))
