"""What the failover test reads back (no tests here): whether every group drained every
partition of a cluster deployment, the counts the projections and the SMTP server hold,
and the children's JSON logs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from sluice.app.assembly import default_apps
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from tests.integration.mail_helpers import SmtpServer

# The groups the worker runs, each with the aggregates it reads.
GROUPS = {name: default_apps().aggregates[name] for name in ("article-views", "link-stats", "mail")}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def unsettled(resources: Resources) -> list[str]:
    """What is not drained yet: events not published, and per group and partition stream
    (retry streams too) entries not read or not acked, retries waiting. Empty: drained."""
    store, keys = resources.store, resources.keys
    position, last = await store.position(POSITION), await store.max_seq()
    found = [] if position >= last else [f"relay at {position} of {last}"]
    places = [
        (group, stream)
        for group, aggregates in GROUPS.items()
        for p in keys.numbers
        for stream in (*(keys.stream(a, p) for a in aggregates), keys.retry(group, p))
    ]
    waiting = [(group, keys.delayed(group, p)) for group in GROUPS for p in keys.numbers]
    pipe = resources.redis.pipeline(transaction=False)
    for _, stream in places:
        pipe.xinfo_stream(stream)
        pipe.xinfo_groups(stream)
    for _, delayed in waiting:
        pipe.zcard(delayed)
    answers: list[Any] = await pipe.execute(raise_on_error=False)
    streams, counts = answers[: 2 * len(places)], answers[2 * len(places) :]
    for (group, stream), info, groups in zip(places, streams[0::2], streams[1::2], strict=True):
        problem = _behind(group, info, groups)
        if problem:
            found.append(f"{group} on {stream}: {problem}")
    for (group, delayed), count in zip(waiting, counts, strict=True):
        if isinstance(count, Exception) or int(count):
            found.append(f"{group} on {delayed}: {count!r}")
    return found


def _behind(group: str, info: Any, groups: Any) -> str | None:
    """How far ``group`` is from having read and acked every entry of one stream (from
    XINFO STREAM and XINFO GROUPS); None when it has."""
    if isinstance(info, redis.ResponseError):  # no such stream: nothing in it
        return None
    if isinstance(info, Exception) or isinstance(groups, Exception):
        return repr(info if isinstance(info, Exception) else groups)
    state = {_text(g["name"]): g for g in groups}.get(group)
    if state is None:
        return f"no group, {info['length']} entries" if int(info["length"]) else None
    if int(state["pending"]) or state["last-delivered-id"] != info["last-generated-id"]:
        delivered, last = _text(state["last-delivered-id"]), _text(info["last-generated-id"])
        return f"pending {state['pending']}, delivered {delivered} of {last}"
    return None


async def history(resources: Resources) -> Counter[str]:
    """The events committed, by type."""
    rows = await resources.store.fetchall("SELECT type, COUNT(*) FROM events GROUP BY type")
    return Counter({str(kind): int(n) for kind, n in rows})


async def views_counted(resources: Resources) -> dict[str, int]:
    rows = await resources.store.fetchall("SELECT article_id, views FROM article_views")
    return {str(a): int(n) for a, n in rows if int(n)}


async def visits_counted(resources: Resources, code: str) -> int:
    row = await resources.store.fetchone("SELECT total FROM link_stats WHERE code = ?", (code,))
    return int(row[0]) if row else 0


def welcomes(smtp: SmtpServer) -> Counter[str]:
    """Mails the SMTP server accepted, per recipient."""
    return Counter(rcpt for m in smtp.messages() for rcpt in m.rcpt_tos)


def log_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:  # a traceback printed as the process died
            lines.append({"level": "raw", "event": line})
    return lines


def log_summary(logs: Path) -> dict[str, Counter[str]]:
    """Per process: its log lines (warnings and above) counted by level and event."""
    return {
        path.stem: Counter(f"{line.get('level')}: {line.get('event')}" for line in log_lines(path))
        for path in sorted(logs.glob("*.log"))
    }


def republished(logs: Path) -> list[tuple[int, int]]:
    """(since, position) of every rewind the relay logged."""
    return [
        (int(line["since"]), int(line["position"]))
        for line in log_lines(logs / "relay.log")
        if line.get("event") == "relay: redis lost entries, republishing"
    ]
