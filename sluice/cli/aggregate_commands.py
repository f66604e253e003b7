"""The commands about event-sourced aggregates, on the database alone: ``sluice events
--aggregate TYPE:ID`` (one aggregate's events in version order) and ``sluice aggregates
adopt TYPE`` (versions for the events a type had before its ``Aggregate`` class,
``sluice.app.adoption``)."""

from __future__ import annotations

import argparse
import sys

import msgspec

from sluice.app.adoption import AdoptionRefused, adopt_history
from sluice.app.assembly import Parts


async def aggregates_command(parts: Parts, args: argparse.Namespace) -> int:
    store = await parts.open_store()
    try:
        adoption = await adopt_history(store, args.aggregate)
    except AdoptionRefused as exc:
        print(f"sluice aggregates adopt: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    for line in adoption.lines():
        print(line)
    return 0


async def aggregate_events(parts: Parts, args: argparse.Namespace) -> int:
    """``--aggregate TYPE:ID``: one event-sourced aggregate's events, in version order."""
    from sluice.history import search as event_search

    try:
        kind, ident = event_search.aggregate_id(args.aggregate)
    except event_search.Invalid as exc:
        print(
            f"sluice events: error: argument --aggregate: {args.aggregate!r} {exc}", file=sys.stderr
        )
        return 2
    store = await parts.open_store()
    try:
        versions = await event_search.of_aggregate(store, kind, ident)
    finally:
        await store.close()
    if args.json:
        items = [{"version": v, **msgspec.structs.asdict(e)} for v, e in versions]
        print(msgspec.json.encode({"items": items}).decode())
        return 0
    for v, e in versions:
        print(f"v{v}  {e.seq}  {e.created_at}  {e.type:<22} {e.trace_id}  {e.event_id}")
    if not versions:
        print(f"no saved events of aggregate {kind}:{ident}")
    return 0
