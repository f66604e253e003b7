"""The commands about streams and groups: ``sluice status`` and ``sluice dlq``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping

import msgspec

from sluice.app.assembly import assemble
from sluice.cli.flow_commands import flow_lines, flow_reports
from sluice.config import Config
from sluice.events import EVENT_TYPES
from sluice.flow.view import group_flows
from sluice.history.size import measure as history_size
from sluice.process.resources import Resources
from sluice.records.dead_letters import (
    held_by,
    list_dead_letters,
    parse_dead_id,
    places_holding,
    redrive_matching,
)
from sluice.records.maintenance import GroupStatus, dead_letter_groups, group_totals, status
from sluice.streams.failures import Failures


async def show_status(config: Config, *, as_json: bool) -> int:
    parts = assemble(config)
    async with parts.open_resources() as resources:
        report = await status(
            resources.redis, resources.keys, resources.store, config.stall_seconds
        )
        history = await history_size(resources.store)
        partitioned = resources.keys.partitions > 1
        flows = await flow_reports(resources, group_flows(parts.apps.flows, config))
    loaded = parts.apps.groups
    if as_json:
        shown = dataclasses.asdict(report) | {
            "groups": [dataclasses.asdict(g) for g in group_totals(report)],
            "history": msgspec.to_builtins(history),
            "flows": [dataclasses.asdict(f) for f in flows],
        }
        print(json.dumps(shown, indent=2))
        return 0
    print(f"relay backlog: {report.relay_backlog}   delayed retries: {report.delayed}")
    if report.paused:
        print(f"paused groups: {', '.join(report.paused)}")
    print(
        f"history: {history.hot_events} hot events (oldest {history.hot_oldest_at or '-'}),"
        f" {history.archived_events} archived in {history.segments} segments"
        f" ({history.archived_bytes} bytes), oldest event {history.oldest_event_at or '-'}"
    )
    for stream in report.streams:
        where = f"  partition={stream.partition}" if partitioned else ""
        where += f"  node={stream.node}" if stream.node else ""
        print(f"{stream.stream}  length={stream.length}{where}")
        for g in stream.groups:
            print(f"  {g.group:<16} {_group_figures(g, loaded)}")
    if partitioned:
        print("groups, every partition together:")
        for g in group_totals(report):
            print(f"  {g.group:<16} {_group_figures(g, loaded)}")
    # Flow groups with nothing waiting and no slot in use are left out (every deployment
    # of the links app has two: exports and imports); ``sluice flow GROUP`` shows any.
    busy = [f for f in flows if f.entries_waiting or f.slots_in_use]
    if busy:
        print("flow control (keys waiting for their turn; slots in use / concurrency):")
        for flow in busy:
            print("\n".join(flow_lines(flow)))
    for s in report.stalled:
        since = "never" if s.since_ack_s is None else f"{s.since_ack_s:.0f} s ago"
        print(
            f"STALLED  {s.group}/{s.consumer}  partition={s.partition}"
            f"  pending={s.pending}  last ack {since}"
        )
    return 0


def _group_figures(g: GroupStatus, loaded: Mapping[str, object]) -> str:
    lag = "?" if g.lag is None else g.lag
    paused = "  PAUSED" if g.paused else ""
    # A group in Redis that no loaded app declares: an app removed from the deployment.
    unloaded = "" if g.group in loaded else "  (no app loaded declares it)"
    return (
        f"consumers={g.consumers} pending={g.pending} lag={lag} dead_letters={g.dead_letters}"
        f"{paused}{unloaded}"
    )


async def dlq(config: Config, args: argparse.Namespace) -> int:
    parts = assemble(config)
    known = parts.apps.groups
    async with parts.open_resources() as resources:
        bulk = getattr(args, "group", None) or getattr(args, "type", None)
        if args.action == "redrive" and (bulk or not args.target):
            return await _dlq_redrive_matching(resources, args, known)
        if args.action != "list":
            return await _dlq_one(resources, args, known)
        groups = [args.group] if args.group else sorted(known)
        if not args.group:
            found = await dead_letter_groups(resources.redis, resources.keys)
            for group in sorted(found - set(groups)):
                unloaded = f"group {group} holds dead letters, and no app loaded declares it"
                print(f"{unloaded} (an app removed from the deployment?)", file=sys.stderr)
                groups.append(group)
        # Newest first, like GET /v1/admin/dead-letters.
        for letter in await list_dead_letters(resources.redis, resources.keys, groups, args.limit):
            print(
                f"{letter.group}  {letter.id}  {letter.event_type}  {letter.event_id}"
                f"  deliveries={letter.deliveries}  {letter.error}"
            )
        return 0


async def _dlq_redrive_matching(
    resources: Resources, args: argparse.Namespace, known: Mapping[str, object]
) -> int:
    """``dlq redrive --group G --type T``: every matching dead letter (one filter at least),
    as POST /v1/admin/dead-letters/redrive; ``known``: the loaded apps' groups."""
    group, event_type = getattr(args, "group", None), getattr(args, "type", None)
    problem = None
    if args.target:
        problem = "give [GROUP] ID, or --group/--type, not both"
    elif not group and not event_type:
        problem = "give [GROUP] ID, or --group and/or --type"
    elif group and group not in known:
        problem = f"unknown group {group!r}; known: {', '.join(sorted(known))}"
    elif event_type and event_type not in EVENT_TYPES:
        problem = f"unknown event type {event_type!r}; known: {', '.join(sorted(EVENT_TYPES))}"
    if problem:
        print(f"redrive: {problem}", file=sys.stderr)
        return 2
    groups = [group] if group else sorted(known)
    moved = await redrive_matching(resources.redis, resources.keys, groups, event_type)
    print(f"redrive: {moved} dead letters sent back")
    return 0


async def _dlq_one(
    resources: Resources, args: argparse.Namespace, known: Mapping[str, object]
) -> int:
    """Redrive or drop the one dead letter ``[GROUP] ID`` names."""
    if len(args.target) > 2:
        print("expected [GROUP] ID", file=sys.stderr)
        return 2
    *named, dead_id = args.target
    try:
        dead = parse_dead_id(dead_id, resources.keys.partitions)
    except ValueError as exc:
        print(f"{args.action}: {exc}", file=sys.stderr)
        return 2
    groups = named or sorted(known)
    places = await places_holding(resources.redis, resources.keys, groups, dead)
    if not places:
        print(f"{args.action}: no such dead letter", file=sys.stderr)
        return 1
    if len(places) > 1:
        several_groups = len({place.group for place in places}) > 1
        choose = "name the group" if several_groups else "give the id with its partition"
        held = held_by(resources.keys, places)
        print(f"{args.action}: held by {held}; {choose}", file=sys.stderr)
        return 1
    [place] = places
    failures = Failures(resources.redis, resources.keys, place.group, place.partition)
    done = (
        await failures.redrive(place.entry) is not None
        if args.action == "redrive"
        else await failures.drop(place.entry)
    )
    print(f"{args.action}: {'done' if done else 'no such dead letter'}")
    return 0 if done else 1
