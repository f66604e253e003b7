"""``sluice aggregates adopt TYPE``: versions for the events an aggregate type had before
its ``Aggregate`` class (``sluice.app.adoption``), on the database alone."""

from __future__ import annotations

import argparse
import sys

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
