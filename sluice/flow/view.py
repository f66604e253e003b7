"""What an operator sees of a group's flow control (``sluice status``, ``sluice flow``,
the admin API's group view, ``/admin`` and ``/metrics``): the keys and entries waiting,
the slots the busiest keys hold, the tokens left, and one key's waiting entries in
order (docs/guides/operate.md, "Operate flow control").

Read only, from the group's flow state in Redis (``sluice.flow.scripts``): the figures
come from one script in the group's slot, so they are of one moment, on one Redis or a
cluster alike. Slots are counted for the keys with waiting entries (the busy ones);
a key whose entries all started at once holds slots that no list names, so they are
not in the totals.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from sluice.flow.spec import Flow, Rate, with_overrides
from sluice.streams.engine_keys import Keys

if TYPE_CHECKING:
    from sluice.config import Config

# The keys read for the top list at most (the busiest among them): a script stays short.
SCAN_KEYS = 10_000
TOP_KEYS = 10

# ARGV: base, keys to read at most, top keys, the key rate's count, ms and bucket, the
# total rate's (count 0: none). Returns keys waiting, entries waiting, the stats hash,
# slots in use (keys read), the overall tokens (-1: no rate), and the top keys as
# (key, waiting, slots, tokens) quads, the busiest first.
_VIEW = """
local base = ARGV[1]
local scan, top = tonumber(ARGV[2]), tonumber(ARGV[3])
local kn, kms, kburst = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local tn, tms, tburst = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function tokens(name, n, ms, burst)
  if n == 0 then return '-1' end
  local got = redis.call('HMGET', base .. name, 'tokens', 'at')
  if not got[1] then return tostring(burst) end
  local have = math.min(burst, tonumber(got[1]) + (now - tonumber(got[2])) * n / ms)
  return tostring(math.floor(have * 100) / 100)
end
local figures, slots = {}, 0
for _, k in ipairs(redis.call('LRANGE', base .. 'keys', 0, scan - 1)) do
  local held = redis.call('ZCOUNT', base .. 'held:' .. k, '(' .. now, '+inf')
  slots = slots + held
  figures[#figures + 1] = {k, redis.call('LLEN', base .. 'wait:' .. k), held}
end
table.sort(figures, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  return a[1] < b[1]
end)
local out = {
  redis.call('LLEN', base .. 'keys'),
  redis.call('HLEN', base .. 'parked'),
  redis.call('HGETALL', base .. 'stats'),
  slots,
  tokens('bucket', tn, tms, tburst),
}
for i = 1, math.min(top, #figures) do
  local f = figures[i]
  out[#out + 1] = {f[1], f[2], f[3], tokens('bucket:' .. f[1], kn, kms, kburst)}
end
return out
"""


@dataclass
class KeyFigures:
    """One key with waiting entries: how many wait, the slots it holds (entries in
    handling), and its rate's tokens now (null: no per-key rate)."""

    key: str
    waiting: int
    slots_in_use: int
    tokens: float | None = None


@dataclass
class FlowStatus:
    """A flow group's limits (as the deployment runs them) and its state now.

    ``keys_waiting``: keys with waiting entries; ``entries_waiting``: entries parked
    in all; ``deferred_total`` / ``released_total``: entries parked / released since
    the state began; ``slots_in_use``: entries in handling of the keys with waiting
    entries; ``tokens``: the overall rate's tokens now (null: no overall rate);
    ``top_keys``: the keys with the most waiting entries, the busiest first."""

    group: str
    key: str  # the event field named, or "function" when a function names the key
    concurrency: int | None
    rate: str | None
    total_rate: str | None
    keys_waiting: int
    entries_waiting: int
    deferred_total: int
    released_total: int
    slots_in_use: int
    tokens: float | None = None
    top_keys: list[KeyFigures] = field(default_factory=list)


@dataclass
class WaitingEntry:
    """A parked entry: its event, where it came from, and since when it waits (null:
    parked by a version that did not note it)."""

    position: int  # 0: the next to start when its key has room
    event_id: str
    type: str
    seq: int | None
    partition: int
    deliveries: int
    waiting_since: str | None


@dataclass
class WaitingPage:
    """A page of one key's waiting entries, oldest first; ``next_cursor`` is null on the
    last page."""

    group: str
    key: str
    waiting: int
    slots_in_use: int
    entries: list[WaitingEntry]
    next_cursor: str | None = None


def rate_text(rate: Rate | None) -> str | None:
    """``"50/s"``, ``"600/60s"``: how a limit reads in a report."""
    if rate is None:
        return None
    per = rate.per_seconds
    unit = "s" if per == 1 else f"{per:g}s"
    return f"{rate.count}/{unit}"


def _rate_args(rate: Rate | None) -> list[Any]:
    return [0, 1, 1] if rate is None else [rate.count, rate.per_seconds * 1000, rate.bucket]


def _tokens(raw: Any) -> float | None:
    value = float(raw)
    return None if value < 0 else value


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def group_flows(declared: Mapping[str, Flow], config: Config) -> dict[str, Flow]:
    """Each flow group's limits as the deployment runs them (its overrides applied)."""
    return {name: with_overrides(name, flow, config) for name, flow in declared.items()}


async def flow_status(
    redis: aioredis.Redis, keys: Keys, group: str, flow: Flow, top: int = TOP_KEYS
) -> FlowStatus:
    """``group``'s flow state now (one script in its slot)."""
    base = keys.flow(group)
    args = [base, SCAN_KEYS, top, *_rate_args(flow.rate), *_rate_args(flow.total_rate)]
    reply: list[Any] = await redis.eval(_VIEW, 1, base + "keys", *args)
    flat = reply[2]
    stats = {_s(k): int(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}
    return FlowStatus(
        group=group,
        key=flow.key if isinstance(flow.key, str) else "function",
        concurrency=flow.concurrency,
        rate=rate_text(flow.rate),
        total_rate=rate_text(flow.total_rate),
        keys_waiting=int(reply[0]),
        entries_waiting=int(reply[1]),
        deferred_total=stats.get("deferred", 0),
        released_total=stats.get("released", 0),
        slots_in_use=int(reply[3]),
        tokens=_tokens(_s(reply[4])),
        top_keys=[KeyFigures(_s(k), int(w), int(h), _tokens(_s(tk))) for k, w, h, tk in reply[5:]],
    )


def parse_cursor(cursor: str) -> tuple[int, str]:
    """A cursor of ``waiting_entries`` (``<position>:<event id>``); ValueError if not one."""
    position, _, event_id = cursor.partition(":")
    if not position.isdigit() or not event_id:
        raise ValueError(cursor)
    return int(position), event_id


def _entry(position: int, raw: bytes | str) -> WaitingEntry:
    entry = json.loads(raw)
    flat = entry.get("f", [])
    fields = dict(zip(flat[::2], flat[1::2], strict=True))
    at = entry.get("t")
    seq = fields.get("seq")
    return WaitingEntry(
        position=position,
        event_id=str(entry["id"]),
        type=str(fields.get("type", "")),
        seq=None if seq is None else int(seq),
        partition=int(entry.get("p", 0)),
        deliveries=int(fields.get("deliveries", 0)),
        waiting_since=None
        if at is None
        else datetime.fromtimestamp(at / 1000, UTC).isoformat(timespec="milliseconds"),
    )


async def waiting_entries(
    redis: aioredis.Redis,
    keys: Keys,
    group: str,
    key: str,
    limit: int,
    cursor: str | None = None,
) -> WaitingPage:
    """``key``'s waiting entries, oldest first, ``limit`` at most, after ``cursor``.

    Entries leave a key's queue at its head only, so a page goes on right after the
    last entry of the page before, wherever it now is; if that one has left, every
    entry before it has too, and the page starts at the head."""
    base = keys.flow(group)
    wait, held = base + "wait:" + key, base + "held:" + key
    start = 0
    if cursor is not None:
        position, last = parse_cursor(cursor)
        before = await redis.lrange(wait, 0, position)
        for index in range(len(before) - 1, -1, -1):
            if json.loads(before[index]).get("id") == last:
                start = index + 1
                break
    pipe = redis.pipeline(transaction=False)
    pipe.lrange(wait, start, start + limit)  # one more: is there a next page?
    pipe.llen(wait)
    raw, waiting = await pipe.execute()
    seconds, micros = await redis.time()  # the leases are of Redis's clock
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    slots = int(await redis.zcount(held, f"({now_ms}", "+inf"))
    entries = [_entry(start + i, r) for i, r in enumerate(raw[:limit])]
    more = len(raw) > limit and entries
    return WaitingPage(
        group=group,
        key=key,
        waiting=int(waiting),
        slots_in_use=slots,
        entries=entries,
        next_cursor=f"{entries[-1].position}:{entries[-1].event_id}" if more else None,
    )
