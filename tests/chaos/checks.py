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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sluice.builtin.accounts.mail.sending import reminder_key
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.cron_runner import slot_text
from sluice.builtin.reminders.events import ReminderDue
from sluice.builtin.reminders.keys import RemindersKeys
from sluice.events import AGGREGATES, decode
from sluice.process.resources import Resources
from sluice.records.maintenance import all_streams
from sluice.relay.relay import POSITION
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.loop import slot_id
from sluice.scheduler.runs import ABANDONED
from tests.chaos.cluster import CHAOS_ENV, WORKER_GROUPS
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
# The tick task's lock: a scheduler killed holding it keeps it this long at most.
LOCK_TTL_S = int(CHAOS_ENV["SLUICE_TASK_LOCK_TTL_MS"]) / 1000
# A run gives its lock back after its outcome commits, and the stamps of its end are taken
# before that commit (before the history lock on PostgreSQL, SQLite's write lock being
# taken already): a lock may outlive them by the commit, allowed a quarter of a tick period.
RELEASE_SLACK_S = 0.5
# Ticks skipped as busy (each explained by a run in progress): at most one per this many
# ticks checked, and at least one (see check_ticks).
TICKS_PER_BUSY_SKIP = 10


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
            if _s(info["name"]) not in WORKER_GROUPS:
                continue  # a registered group no worker runs here (webhooks): it lags
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


def _sent_viewer(viewer: str) -> str:
    """The ``viewer`` a request body sent, from the event's (``viewer:<as sent>``)."""
    return viewer.removeprefix("viewer:")


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


async def check_views(
    resources: Resources, ledger: Ledger, http: aiohttp.ClientSession, api: Api
) -> int:
    """The projection equals the history, which holds every accepted view once."""
    assert ledger.views_not_counted == 0, "a new viewer was answered counted=false"
    rows = await _json_rows(resources, "ArticleViewed", "viewer", "article_id")
    history = [(_sent_viewer(viewer), article) for viewer, article in rows]
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
    welcome = {
        p.name.removeprefix("welcome_").removesuffix(".eml"): p
        for p in mail_dir.glob("welcome_*.eml")
    }
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


async def check_redirects(
    resources: Resources, ledger: Ledger, setup: Setup, apis: list[Api], http: aiohttp.ClientSession
) -> int:
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


async def check_reminders(
    resources: Resources, setup: Setup, faults: Faults, stopped_at: float, mail_dir: Path
) -> int:
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
            key = RemindersKeys(resources.keys.prefix).reminder_occurrence(
                reminder.id, slot_text(slot)
            )
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


@dataclass(frozen=True)
class TickRun:
    """A run record of the tick task, with its moments as ``time.time()`` values."""

    id: str
    slot: datetime
    status: str
    holder: str
    error: str | None
    started: float  # started_at: stamped just after the run took the task's lock
    # The later of finished_at and its TaskRunFinished's stamp, both taken before the
    # outcome commits (the lock is given back after that); None: the record never finished.
    ended: float | None

    @property
    def died(self) -> bool:
        """Its process died holding it: the record was left ``running`` or marked abandoned."""
        return self.ended is None or self.error == ABANDONED


@dataclass
class TickCheck:
    checked: int = 0  # occurrences with their one succeeded run and one effect
    busy_skips: dict[datetime, str] = field(default_factory=dict)  # excused, with the reason

    @property
    def busy_skips_allowed(self) -> int:
        return max(1, self.checked // TICKS_PER_BUSY_SKIP)


def _busy_skips(logs: list[Path]) -> dict[datetime, float]:
    """Tick occurrences a scheduler skipped because a run still held the task's lock
    (its own log line), each with the moment it logged that: after it found the lock held."""
    skips: dict[datetime, float] = {}
    for log in logs:
        for raw in log.read_text().splitlines() if log.exists() else []:
            if "still in progress" not in raw:
                continue
            line = json.loads(raw)
            if line.get("task") == "tick":
                slot = parse_time(line["scheduled_for"])
                at = parse_time(line["timestamp"]).timestamp()
                skips[slot] = min(at, skips.get(slot, at))
    return skips


def _killed_holder(holder: str, faults: Faults) -> Injected | None:
    return next((k for k in faults.scheduler_kills() if _claimed_by(holder, k)), None)


def _busy_explained(
    slot: datetime, logged_at: float, runs: list[TickRun], faults: Faults
) -> str | None:
    """What held the tick's lock when the occurrence due at ``slot`` found it taken.

    The skipping scheduler tried the lock at the slot or later (and, should it
    retry a busy lock, until it gave up), and before it logged the skip at
    ``logged_at``. So a real holder is a run that took the lock before
    ``logged_at`` and had not given it back at ``slot``: either a run whose
    outcome was recorded no earlier than ``RELEASE_SLACK_S`` before ``slot``,
    or one whose scheduler was killed holding it, whose lock then outlived the
    kill by at most its TTL. A scheduler killed between taking the lock and
    writing the record leaves no record: the kill itself, before ``logged_at``
    and at most a TTL before ``slot``, is then the explanation. Nothing else
    explains a busy lock, so a service that skipped ticks as busy without a
    run in progress fails here.
    """
    at = slot.timestamp()
    for run in runs:
        if run.slot == slot or run.started > logged_at:
            continue
        if not run.died:
            assert run.ended is not None
            how, moment = f"recorded {run.status}", run.ended
            held_until = run.ended + RELEASE_SLACK_S
        elif (kill := _killed_holder(run.holder, faults)) is not None:
            how, moment = "its scheduler killed", kill.started
            held_until = kill.started + LOCK_TTL_S
        else:
            continue
        if held_until >= at:
            return (
                f"the run of {run.slot:%H:%M:%S} took the lock at {run.started - at:+.3f} s,"
                f" {how} at {moment - at:+.3f} s"
            )
    for kill in faults.scheduler_kills():
        if at - LOCK_TTL_S <= kill.started <= logged_at:
            return f"{kill.target} was killed at {kill.started - at:+.3f} s, maybe holding the lock"
    return None


async def _killed_claim(
    resources: Resources, slot: datetime, found: list[TickRun], faults: Faults
) -> bool:
    """The occurrence was claimed by a scheduler as it was killed: never run, or abandoned."""
    kill = _near_kill(slot, faults)
    if kill is None:
        return False
    if not found:
        key = resources.keys.task_occurrence("tick", slot_id(slot))
        return _claimed_by(await resources.redis.get(key), kill)
    run = found[0]
    return run.status != "succeeded" and _claimed_by(run.holder, kill) and run.error == ABANDONED


async def _tick_runs(resources: Resources) -> list[TickRun]:
    store = resources.store
    rows = await store.fetchall(
        f"SELECT {store.dialect.payload_field('run_id')}, created_at FROM events"
        " WHERE type = 'TaskRunFinished'"
    )
    committed = {str(run_id): parse_time(str(at)).timestamp() for run_id, at in rows}
    rows = await store.fetchall(
        "SELECT id, scheduled_for, status, holder, error, started_at, finished_at FROM task_runs"
        " WHERE task = 'tick'"
    )
    runs = []
    for run_id, slot, status, holder, error, started, finished in rows:
        ends = [parse_time(str(finished)).timestamp()] if finished is not None else []
        ends += [committed[str(run_id)]] if str(run_id) in committed else []
        runs.append(
            TickRun(
                str(run_id),
                parse_time(str(slot)),
                str(status),
                str(holder),
                None if error is None else str(error),
                parse_time(str(started)).timestamp(),
                max(ends) if ends else None,
            )
        )
    return runs


async def check_ticks(
    resources: Resources, faults: Faults, stopped_at: float, logs: list[Path]
) -> TickCheck:
    """One succeeded run and one effect per tick occurrence, outside a fault's own moment.

    Let go: occurrences due while Redis was away (no claim, no lock), the one
    a scheduler claimed as it was killed, and occurrences skipped because the
    previous run still held the task's lock (logged by the service). That last
    excuse is bounded twice, by what the tick task is: one RPUSH
    (tests/integration/scheduler_tasks.py), so a whole run (take the lock, a
    read and three small transactions around the RPUSH, give the lock back)
    takes tens of milliseconds (at most 0.5 s seen under this test's load on a
    busy two-core machine) against the 2 s between occurrences; and the lock's
    TTL (1.5 s, conftest) is shorter than those 2 s, so even a scheduler killed
    holding it frees it before the next occurrence (unless that run itself was
    already late). So each busy skip must name the run that really was in
    progress at the skipped instant, or the scheduler kill whose lock outlived
    it (``_busy_explained``); and as such runs are rare outliers, at most one
    busy skip per ``TICKS_PER_BUSY_SKIP`` ticks checked is allowed (at least
    one, for the killed scheduler's lock). A scheduler that retries a busy lock
    for a while, or hands the occurrence to another replica, before it skips
    only makes skips rarer; the per-skip bound takes the moment of the (first)
    log line as the latest moment the lock was found busy, so it holds either way.
    """
    runs = await _tick_runs(resources)
    by_slot: dict[datetime, list[TickRun]] = defaultdict(list)
    for run in runs:
        by_slot[run.slot].append(run)
    raw = await resources.redis.lrange(effects_key("tick"), 0, -1)
    effects = Counter(_s(e).split(" ", 1)[0] for e in raw)
    assert all(len(found) == 1 for found in by_slot.values()), "an occurrence ran twice"
    skips = _busy_skips(logs)
    result = TickCheck()
    slot, after_faults = min(by_slot), 0
    last_fault = max(f.repaired for f in faults.injected)
    while slot.timestamp() < stopped_at - STOP_MARGIN_S:
        found = by_slot.get(slot, [])
        if _in_redis_fault(slot, faults):
            pass
        elif not found and slot in skips:
            why = _busy_explained(slot, skips[slot], runs, faults)
            assert why, (
                f"tick {slot.isoformat()} was skipped as busy, but no run held the lock then"
                " and no scheduler had just been killed"
            )
            result.busy_skips[slot] = why
        elif not await _killed_claim(resources, slot, found, faults):
            assert found and found[0].status == "succeeded", f"tick {slot.isoformat()}: {found}"
            assert effects[found[0].id] == 1, f"tick {slot.isoformat()} had no single effect"
            result.checked += 1
            after_faults += slot.timestamp() > last_fault
        slot += timedelta(seconds=TICK_EVERY)
    assert after_faults >= 3, "too few occurrences after the last fault were observed"
    assert len(result.busy_skips) <= result.busy_skips_allowed, (
        f"{len(result.busy_skips)} ticks skipped as busy, {result.checked} checked:"
        f" more than one in {TICKS_PER_BUSY_SKIP} ({result.busy_skips})"
    )
    return result


def check_mid_batch(faults: Faults) -> int:
    """Every worker kill hit a worker holding entries it had not acked: returns how many.

    By construction (faults.py ``_kill_worker_mid_batch``): the worker is
    frozen (SIGSTOP) once it holds un-acked entries and killed only if it
    still holds some while frozen, when it cannot ack them any more; the count
    is read again after the kill. The one way to miss is that the worker held
    nothing within the wait (faults.MID_BATCH_WAIT_S, 30 s, past a relay's
    takeover and the workers' reconnect after a Redis fault): under this
    traffic a group gets work several times a second once events flow, so that
    means the pipeline stalled, and the kill tested nothing for the restart to
    finish. Either way a failure, so every worker kill is held to it.
    """
    kills = [f for f in faults.injected if f.kind == "worker"]
    missed = [f"{kill.target} ({kill.detail})" for kill in kills if not kill.pending]
    assert kills, "no worker was killed"
    assert not missed, f"worker kills with nothing un-acked at the kill: {missed}"
    return len(kills)


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
    rows = await _json_rows(resources, "ArticleViewed", "viewer")
    history = {_sent_viewer(viewer) for (viewer,) in rows}
    return len(history & views.keys())
