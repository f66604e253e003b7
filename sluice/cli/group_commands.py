"""``sluice groups``: list the handler groups, pause one, resume one (the database alone,
as ``POST /v1/admin/groups/{group}/pause`` and ``.../resume``)."""

from __future__ import annotations

import argparse
import sys

from sluice.app.assembly import assemble
from sluice.config import Config
from sluice.records import pause


async def groups_command(config: Config, args: argparse.Namespace) -> int:
    name: str = getattr(args, "name", "")
    parts = assemble(config)
    groups = parts.apps.groups
    if args.action != "list" and name not in groups:
        print(f"unknown group {name!r}; known: {', '.join(sorted(groups))}", file=sys.stderr)
        return 2
    store = await parts.open_store()
    try:
        if args.action == "pause":
            await pause.pause(store, name)
            print(f"{name}: paused (every worker stops taking its entries within 2 s)")
        elif args.action == "resume":
            await pause.resume(store, name)
            print(f"{name}: resumed")
        else:
            paused = await pause.paused_groups(store)
            for group in sorted(groups):
                since = paused.get(group)
                print(f"{group:<16} {'running' if since is None else f'paused since {since}'}")
    finally:
        await store.close()
    return 0
