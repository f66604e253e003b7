"""The ``ping-counts`` projection of the ``engine-test`` app: pings per source, for the
tests of replays and of the history readers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

from sluice.app import Event, ProjectionContext, Tx
from tests.engine_app.app import app
from tests.engine_app.events import Pinged

PING_COUNTS_DDL = """
CREATE TABLE engine_ping_counts{s} (
    source TEXT PRIMARY KEY,
    pings INTEGER NOT NULL
);
"""

PROJECTION = app.projection(
    "ping-counts",
    events=(Pinged,),
    schema=PING_COUNTS_DDL,
    tables=("engine_ping_counts",),
)


class _Source(msgspec.Struct):
    source: str


@PROJECTION.apply
async def apply(events: Sequence[Event], tx: Tx, ctx: ProjectionContext) -> None:
    await _write(tx, Counter(e.source for e in events if isinstance(e, Pinged)), ctx)


@PROJECTION.apply_payloads
async def apply_payloads(payloads: bytes | str, tx: Tx, ctx: ProjectionContext) -> None:
    sources = msgspec.json.decode(payloads, type=list[_Source])
    await _write(tx, Counter(p.source for p in sources), ctx)


async def _write(tx: Tx, counts: Counter[str], ctx: ProjectionContext) -> None:
    await tx.upsert_rows(
        ctx.table("engine_ping_counts"),
        ("source", "pings"),
        sorted(counts.items()),
        keys=("source",),
        add=("pings",),
    )
