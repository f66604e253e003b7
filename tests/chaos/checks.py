"""What must hold once the chaos is over: every count exact, nothing missing, nothing twice.

The truth is the event history in the database (every 2xx command committed
its events there before answering) and the ledger of what the API answered.
Each check compares a derived state that a user sees (projections, link
statistics, mail files, run records, reminder occurrences) with both.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sluice.events import AGGREGATES, ReminderDue, decode
from sluice.mail.sending import reminder_key
from sluice.resources import Resources
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.loop import slot_id
from sluice.scheduler.reminders import slot_text
from sluice.scheduler.runs import ABANDONED
from sluice.store import reminders as stored
from sluice.streams.maintenance import all_streams
from sluice.streams.relay import POSITION
from tests.chaos.conftest import WORKER_GROUPS
from tests.chaos.faults import Faults, Injected
from tests.chaos.traffic import ARTICLES, Api, Ledger, Setup
from tests.integration.scheduler_tasks import effects_key

TICK_EVERY = 2  # scheduler_tasks' default TEST_TICK_CRON: */2 * * * * *
# Around a Redis stop: a tick may be skipped or fail until every client has reconnected.
REDIS_MARGIN_S = (0.5, 3.0)
# Around a scheduler kill: the victim may hold the claim of an occurrence it never ran.
KILL_MARGIN_S = (3.0, 0.5)
# Occurrences due this long before the schedulers stopped must have run to their end.
STOP_MARGIN_S = 2.0


Run = tuple[str, str, str, str | None]  # id, status, holder, error of a run record


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def backlog(resources: Resources) -> str | None:
    """What is still to publish or consume; None once everything is."""
    store, redis, keys = resources.store, resources.redis, resources.keys
    head, position = await store.max_seq(), await store.position(POSITION)
    if position < head:
        return f"relay at {position} of {head}"
    for stream in await all_streams(redis, keys):
        last = (await redis.xinfo_stream(stream))["last-generated-id"]
        for info in await redis.xinfo_groups(stream):
            if info["pending"] or info["last-delivered-id"] != last:
                return f"{stream} / {_s(info['name'])}: {info['pending']} pending, behind"
    for group in WORKER_GROUPS:
        if await redis.zcard(keys.delayed(group)):
            return f"retries of {group} waiting"
    return None


async def settle(resources: Resources, timeout: float = 90.0) -> float:
    """Wait until everything is published and consumed; returns how long it took."""
    started = time.monotonic()
    left: str | None = "not checked yet"
    while time.monotonic() - started < timeout:
        try:
            left = await backlog(resources)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            left = f"redis: {exc!r}"
        if left is None:
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"never settled within {timeout}s: {left}")


async def _json_rows(resources: Resources, event_type: str, *fields: str) -> list[tuple[Any, ...]]:
    columns = ", ".join(resources.store.dialect.payload_field(f) for f in fields)
    rows = await resources.store.fetchall(
        f"SELECT {columns} FROM events WHERE type = ? ORDER BY seq", (event_type,)
    )
    return [tuple(row) for row in rows]


async def check_published(resources: Resources) -> int:
    """Every committed event is in its stream, no dead letters: returns the history's size."""
    redis, keys = resources.redis, resources.keys
    total = 0
    for aggregate in sorted(AGGREGATES):
        rows = await resources.store.fetchall(
            "SELECT event_id FROM events WHERE aggregate = ?", (aggregate,)
        )
        entries: Any = await redis.xrange(keys.stream(aggregate))
        published = {_s(fields[b"event_id"]) for _, fields in entries}
        missing = {str(r[0]) for r in rows} - published
        assert not missing, f"{len(missing)} committed {aggregate} events never published"
        total += len(rows)
    for group in WORKER_GROUPS:
        assert await redis.xlen(keys.dead(group)) == 0, f"dead letters in {group}"
    return total


async def check_views(resources: Resources, ledger: Ledger, http: aiohttp.ClientSession,
                      api: Api) -> int:  # fmt: skip
    """The projection equals the history, which holds every accepted view once."""
    assert ledger.views_not_counted == 0, "a new viewer was answered counted=false"
    history = await _json_rows(resources, "ArticleViewed", "viewer", "article_id")
    viewers = Counter(viewer for viewer, _ in history)
    assert max(viewers.values()) == 1, "a view was committed twice"
    committed = dict(history)
    lost = {v for v in ledger.views if committed.get(v) != ledger.views[v]}
    assert not lost, f"{len(lost)} views answered counted=true are not in the history"
    unknown = committed.keys() - ledger.views.keys() - ledger.views_uncertain.keys()
    assert not unknown, f"{len(unknown)} views in the history that nobody sent"
    per_article = Counter(committed.values())
    rows = await resources.store.fetchall("SELECT article_id, views FROM article_views")
    assert {str(a): int(v) for a, v in rows} == dict(per_article)
    for article in ARTICLES:
        async with http.get(f"{api.url}/v1/articles/{article}") as response:
            assert (await response.json())["views"] == per_article[article], article
    # Today's leaderboard (Redis sorted sets, rewritten after the restart and the outage).
    async with http.get(f"{api.url}/v1/articles/top?period=day&limit=10") as response:
        top = await response.json()
    days = await resources.store.fetchone(
        "SELECT MIN(substr(created_at, 1, 10)), MAX(substr(created_at, 1, 10)) FROM events"
        " WHERE type = 'ArticleViewed'"
    )
    if days is not None and days[0] == days[1] == top["start"]:  # not across midnight UTC
        assert {i["article_id"]: i["views"] for i in top["items"]} == dict(per_article)
    return len(committed)


async def check_users_and_mail(resources: Resources, ledger: Ledger, mail_dir: Path) -> int:
    """One user, one UserRegistered and one welcome mail per registration answered."""
    rows = await resources.store.fetchall("SELECT id, email FROM users")
    by_email = {str(e): str(i) for i, e in rows}
    assert by_email.keys() == ledger.users.keys(), "users differ from the registrations answered"
    for address, user_id in ledger.users.items():
        assert user_id is None or by_email[address] == user_id, address
    registered = Counter(uid for (uid,) in await _json_rows(resources, "UserRegistered", "user_id"))
    assert registered == Counter(by_email.values()), "UserRegistered missing or twice"
    welcome = {p.name.removeprefix("welcome_").removesuffix(".eml"): p
               for p in mail_dir.glob("welcome_*.eml")}  # fmt: skip
    assert welcome.keys() == set(by_email.values()), "welcome mails differ from the users"
    for address, user_id in by_email.items():
        message = email.message_from_bytes(welcome[user_id].read_bytes(), policy=email.policy.SMTP)
        assert message["Message-ID"] == f"<welcome_{user_id}@localhost>"
        assert address in str(message["To"])
    return len(by_email)


async def check_mail_log(resources: Resources, mail_dir: Path) -> int:
    """Every mail key recorded ``sent``, one file each, none left reserved."""
    rows = await resources.store.fetchall("SELECT key, state FROM mail_sends")
    assert {str(state) for _, state in rows} <= {"sent"}, "mail keys left reserved"
    files = {p.name.removesuffix(".eml") for p in mail_dir.glob("*.eml")}
    assert files == {str(key) for key, _ in rows}
    return len(files)


async def check_redirects(resources: Resources, ledger: Ledger, setup: Setup,
                          apis: list[Api], http: aiohttp.ClientSession) -> int:  # fmt: skip
    """Committed visits and link statistics equal the 302s answered, per link and replica."""
    history = Counter(await _json_rows(resources, "LinkVisited", "code", "referrer_host"))
    answered = Counter(
        {(code, apis[i].referrer_host): n for (code, i), n in ledger.redirects.items()}
    )
    assert history == answered, "committed visits differ from the 302s answered"
    for code, token in setup.links.items():
        async with http.get(
            f"{apis[0].url}/v1/links/{code}/stats", headers={"Authorization": token}
        ) as response:
            stats = await response.json()
        expected = {host: n for (c, host), n in answered.items() if c == code}
        assert stats["total"] == sum(expected.values()), code
        assert {r["referrer"]: r["visits"] for r in stats["referrers"]} == expected, code
    return sum(answered.values())


def _claimed_by(claim: bytes | str | None, kill: Injected) -> bool:
    return claim is not None and _s(claim).split(":")[1] == str(kill.pid)


def _near_kill(slot: datetime, faults: Faults) -> Injected | None:
    before, after = KILL_MARGIN_S
    for kill in faults.scheduler_kills():
        if kill.started - before <= slot.timestamp() <= kill.started + after:
            return kill
    return None


async def check_reminders(resources: Resources, setup: Setup, faults: Faults,
                          stopped_at: float, mail_dir: Path) -> int:  # fmt: skip
    """Each occurrence fired once (row, ReminderDue, mail), none skipped, also without Redis."""
    due_rows = await resources.store.events_after(0, 1_000_000, types=["ReminderDue"])
    events = [decode(row.payload) for row in due_rows]
    due = Counter((e.reminder_id, e.scheduled_for) for e in events if isinstance(e, ReminderDue))
    total = 0
    for reminder in setup.reminders:
        slots = await stored.occurrences(resources.store, reminder.id)
        assert slots, f"reminder {reminder.id} never fired"
        mine = {slot: n for (rid, slot), n in due.items() if rid == reminder.id}
        assert mine == dict.fromkeys(slots, 1), "an occurrence without exactly one ReminderDue"
        schedule = parse_cron(reminder.cron, reminder.timezone)
        expected, at = [], slots[0]
        while at <= slots[-1]:
            expected.append(at)
            at = schedule.next_after(at)
        assert at.timestamp() >= stopped_at - STOP_MARGIN_S, "stopped firing before the end"
        for slot in set(expected) - set(slots):
            kill = _near_kill(slot, faults)
            key = resources.keys.reminder_occurrence(reminder.id, slot_text(slot))
            assert kill and _claimed_by(await resources.redis.get(key), kill), (
                f"reminder occurrence {slot.isoformat()} never fired"
            )
        mails = {
            p.name.removesuffix(".eml") for p in mail_dir.glob(f"reminder_{reminder.id}_*.eml")
        }
        assert mails == {reminder_key(reminder.id, slot) for slot in slots}
        total += len(slots)
    return total


def _in_redis_fault(slot: datetime, faults: Faults) -> bool:
    before, after = REDIS_MARGIN_S
    return any(a - before <= slot.timestamp() <= b + after for a, b in faults.redis_down())


def _logged_busy_skip(logs: list[Path], slot: datetime) -> bool:
    """A scheduler logged that it skipped this tick: the previous run still held the lock."""
    stamp = slot.isoformat()
    for log in logs:
        for raw in log.read_text().splitlines() if log.exists() else []:
            if stamp in raw and "still in progress" in raw:
                line = json.loads(raw)
                if line.get("task") == "tick" and line.get("scheduled_for") == stamp:
                    return True
    return False


async def _excused(resources: Resources, slot: datetime, found: list[Run], faults: Faults,
                   logs: list[Path]) -> bool:  # fmt: skip
    """An occurrence the design lets go: due while Redis was away, skipped while the
    previous run held the lock (logged), or claimed by a scheduler as it was killed."""
    if _in_redis_fault(slot, faults) or (not found and _logged_busy_skip(logs, slot)):
        return True
    kill = _near_kill(slot, faults)
    if kill is None:
        return False
    if not found:
        key = resources.keys.task_occurrence("tick", slot_id(slot))
        return _claimed_by(await resources.redis.get(key), kill)
    _, status, holder, error = found[0]
    return status != "succeeded" and _claimed_by(holder, kill) and error == ABANDONED


async def check_ticks(
    resources: Resources, faults: Faults, stopped_at: float, logs: list[Path]
) -> int:
    """One succeeded run and one effect per tick occurrence, outside a fault's own moment."""
    rows = await resources.store.fetchall(
        "SELECT id, scheduled_for, status, holder, error FROM task_runs WHERE task = 'tick'"
    )
    by_slot: dict[datetime, list[Run]] = defaultdict(list)
    for run_id, slot, status, holder, error in rows:
        by_slot[parse_time(str(slot))].append((str(run_id), str(status), str(holder), error))
    raw = await resources.redis.lrange(effects_key("tick"), 0, -1)
    effects = Counter(_s(e).split(" ", 1)[0] for e in raw)
    assert all(len(runs) == 1 for runs in by_slot.values()), "an occurrence ran twice"
    slot, checked, after_faults = min(by_slot), 0, 0
    last_fault = max(f.repaired for f in faults.injected)
    while slot.timestamp() < stopped_at - STOP_MARGIN_S:
        found = by_slot.get(slot, [])
        if not await _excused(resources, slot, found, faults, logs):
            assert found and found[0][1] == "succeeded", f"tick {slot.isoformat()}: {found}"
            assert effects[found[0][0]] == 1, f"tick {slot.isoformat()} had no single effect"
            checked += 1
            after_faults += slot.timestamp() > last_fault
        slot += timedelta(seconds=TICK_EVERY)
    assert after_faults >= 3, "too few occurrences after the last fault were observed"
    return checked


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def check_setup_events(resources: Resources, setup: Setup) -> None:
    """The links and reminders made at the start have their one creation event each."""
    links = Counter(code for (code,) in await _json_rows(resources, "LinkCreated", "code"))
    assert links == dict.fromkeys(setup.links, 1)
    made = Counter(r for (r,) in await _json_rows(resources, "ReminderCreated", "reminder_id"))
    assert made == {reminder.id: 1 for reminder in setup.reminders}


async def committed_of(resources: Resources, views: dict[str, str]) -> int:
    """How many of these (uncertain) views are in the history."""
    history = {viewer for (viewer,) in await _json_rows(resources, "ArticleViewed", "viewer")}
    return len(history & views.keys())
