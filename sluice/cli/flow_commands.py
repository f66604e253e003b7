"""``sluice flow``: a flow group's limits, its keys waiting and the busiest of them, and
one key's waiting entries in order (``--key``); and the flow block of ``sluice status``
(docs/guides/operate.md, "Operate flow control")."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping

from sluice.app.assembly import assemble
from sluice.config import Config
from sluice.flow.spec import Flow
from sluice.flow.view import FlowStatus, WaitingPage, flow_status, group_flows, waiting_entries
from sluice.process.resources import Resources


def _limit(value: object) -> str:
    return "-" if value is None else str(value)


def flow_lines(report: FlowStatus) -> list[str]:
    """A flow group in ``sluice status`` and ``sluice flow``: its limits and totals, then
    its busiest keys with their waiting entries and slots (in use / concurrency)."""
    tokens = "" if report.tokens is None else f" tokens={report.tokens:g}"
    lines = [
        f"  {report.group:<16} key={report.key} concurrency={_limit(report.concurrency)}"
        f" rate={_limit(report.rate)} total_rate={_limit(report.total_rate)}{tokens}",
        f"  {'':<16} keys_waiting={report.keys_waiting}"
        f" entries_waiting={report.entries_waiting} deferred_total={report.deferred_total}"
        f" slots_in_use={report.slots_in_use}",
    ]
    for k in report.top_keys:
        slots = f"{k.slots_in_use}/{_limit(report.concurrency)}"
        key_tokens = "" if k.tokens is None else f" tokens={k.tokens:g}"
        lines.append(f"  {'':<16}   {k.key}  waiting={k.waiting} slots={slots}{key_tokens}")
    return lines


async def flow_reports(resources: Resources, flows: Mapping[str, Flow]) -> list[FlowStatus]:
    """Every flow group's report, by name."""
    return [
        await flow_status(resources.redis, resources.keys, group, flows[group])
        for group in sorted(flows)
    ]


def _page_lines(page: WaitingPage) -> list[str]:
    lines = [
        f"{page.group} key {page.key}: {page.waiting} waiting, {page.slots_in_use} in handling"
    ]
    for e in page.entries:
        since = e.waiting_since or "-"
        lines.append(
            f"  {e.position:>6}  {e.event_id}  {e.type}  waiting since {since}"
            f"  partition={e.partition} deliveries={e.deliveries}"
        )
    if page.next_cursor:
        lines.append(f"  more: --after {page.next_cursor}")
    return lines


async def flow_command(config: Config, args: argparse.Namespace) -> int:
    parts = assemble(config)
    flows = group_flows(parts.apps.flows, config)
    if args.group not in flows:
        known = ", ".join(sorted(flows)) or "none"
        print(f"no flow group {args.group!r}; groups with flow control: {known}", file=sys.stderr)
        return 2
    async with parts.open_resources() as resources:
        if args.key is None:
            report = await flow_status(
                resources.redis, resources.keys, args.group, flows[args.group], args.limit
            )
            page = None
        else:
            try:
                page = await waiting_entries(
                    resources.redis, resources.keys, args.group, args.key, args.limit, args.after
                )
            except ValueError:
                print(f"--after {args.after!r} is no cursor sluice flow gave", file=sys.stderr)
                return 2
    if page is not None:
        shown = json.dumps(dataclasses.asdict(page), indent=2) if args.json else _page_lines(page)
    else:
        shown = (
            json.dumps(dataclasses.asdict(report), indent=2) if args.json else flow_lines(report)
        )
    print(shown if isinstance(shown, str) else "\n".join(shown))
    return 0
