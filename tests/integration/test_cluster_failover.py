"""Failover under traffic (docs/guides/redis-cluster.md, issue 15): a Redis Cluster primary killed
with kill -9 while redirects, article views and registrations flow, and every count exact
afterwards.

The test starts a cluster of its own (3 primaries, 3 replicas; the session's cluster is
never killed) and, as deployed, an API, a relay, a worker (``article-views``,
``link-stats``, ``mail``) and two scheduler processes on it, a reminder firing every
second, with the cluster's 16 stream partitions and a
real SMTP server. The victim is the primary holding the link's visits partition (and
some of the articles'). Its replica is frozen (SIGSTOP) while traffic goes on, until the
victim has taken writes the replica lacks; then the victim is killed and the replica
resumed, so the failover loses a tail of acknowledged entries, acks and deliveries, as
asynchronous replication does. Traffic goes on through the promotion and after it.

Once drained: each article's views equal the views the API answered as counted, the
link's statistics equal the redirects answered (visitors, referrers and browsers too),
every registered user got exactly one welcome mail, the reminder fired every second
once (one occurrence and one ``ReminderDue`` each), no group has a dead letter, no
answer was other than expected, and every process is still running. The relay must have
republished the lost tail from the database.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from redis.asyncio.cluster import RedisCluster as ClusterClient

from sluice.app.testing import Child, child_env, wait_answering, wait_for
from sluice.builtin.reminders import stored
from sluice.builtin.reminders.events import ReminderDue
from sluice.config import Config
from sluice.embedded.redis_cluster_server import RedisCluster
from sluice.embedded.redis_server import RedisServer, free_port
from sluice.events import decode, utcnow
from sluice.process.resources import Resources
from tests.integration.failover_checks import (
    GROUPS,
    history,
    log_summary,
    republished,
    unsettled,
    views_counted,
    visits_counted,
    welcomes,
)
from tests.integration.failover_load import Load
from tests.integration.link_traffic import comparable, today, traffic
from tests.integration.mail_helpers import SmtpServer, smtp_server
from tests.link_helpers import add_link, add_user, bearer

pytestmark = pytest.mark.slow

CODE = "failover"
LOST = 20  # visits the victim takes while its replica is frozen, at least
MAX_ROUNDS = 3000
SCHEDULERS = ("scheduler-1", "scheduler-2")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A cluster of this test's own: one of its primaries gets killed."""
    server = RedisCluster(tmp_path / "cluster")
    server.start()
    try:
        yield server
    finally:
        for node in server.live():  # a node left frozen by a failed test stops too
            assert node.process is not None
            os.kill(node.process.pid, signal.SIGCONT)
        server.stop()


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with smtp_server() as server:
        yield server


@pytest.fixture
def config(make_config: Callable[..., Config], cluster: RedisCluster, smtp: SmtpServer) -> Config:
    return make_config(
        redis_cluster_nodes=cluster.seeds, redis_password=cluster.password, smtp_url=smtp.url
    )


def node_client(node: RedisServer, password: str) -> redis.Redis:
    return redis.Redis(port=node.port, password=password, socket_timeout=2)


def role(node: RedisServer, password: str) -> dict[str, Any]:
    with node_client(node, password) as client:
        info: dict[str, Any] = client.info("replication")
    return info


def replica_of(cluster: RedisCluster, primary: RedisServer) -> RedisServer:
    for node in cluster.live():
        info = role(node, cluster.password)
        if info["role"] == "slave" and int(info["master_port"]) == primary.port:
            return node
    raise AssertionError(f"no replica of {primary.port}")


async def owner(resources: Resources, key: str) -> str:
    client: Any = resources.redis
    assert isinstance(client, ClusterClient)
    await client.initialize()
    node = client.get_node_from_key(key)
    assert node is not None
    return str(node.name)


async def choose(resources: Resources, cluster: RedisCluster) -> tuple[RedisServer, list[str]]:
    """The victim (the primary of the link's visits) and four articles, two on it."""
    keys = resources.keys
    address = await owner(resources, keys.stream("visits", keys.partition_of(CODE)))
    victim = next(n for n in cluster.nodes if address.endswith(f":{n.port}"))
    on: list[str] = []
    off: list[str] = []
    for article in (f"article-{i}" for i in range(200)):
        place = await owner(resources, keys.stream("articles", keys.partition_of(article)))
        (on if place == address else off).append(article)
    assert len(on) >= 2 and len(off) >= 2
    return victim, on[:2] + off[:2]


async def start_deployment(
    resources: Resources, spawn: Callable[..., Child], logs: Path, smtp: SmtpServer
) -> tuple[dict[str, Child], str]:
    await add_user(resources.store)  # the owner, with the token ``bearer()`` sends
    await add_link(resources.store, CODE, "https://example.org/failover")
    port = free_port()
    limits = {"SLUICE_REGISTRATIONS_PER_CLIENT": "100000"}  # every registration from one address
    every_second = {"SLUICE_REMINDER_MIN_INTERVAL": "1"}
    children = {
        "api": spawn("api", SLUICE_PORT=str(port), log=logs / "api.log", **limits, **every_second),
        "relay": spawn("relay", log=logs / "relay.log"),
        "worker": spawn("worker", *GROUPS, log=logs / "worker.log", SLUICE_SMTP_URL=smtp.url),
        **{
            name: spawn("scheduler", log=logs / f"{name}.log", **every_second)
            for name in SCHEDULERS
        },
    }
    base_url = f"http://127.0.0.1:{port}"
    await wait_answering([base_url])
    return children, base_url


async def every_second(http: aiohttp.ClientSession, base_url: str) -> str:
    """A reminder of the link's owner firing each second; its id."""
    body = {"cron": "* * * * * *", "timezone": "UTC", "text": "failover"}
    async with http.post(f"{base_url}/v1/reminders", json=body, headers=bearer()) as response:
        assert response.status == 201, await response.text()
        reminder_id: str = (await response.json())["id"]
    return reminder_id


async def reminder_counts(resources: Resources, reminder_id: str) -> tuple[list[str], list[str]]:
    """The reminder's slots as recorded, and as its ``ReminderDue`` events say, in order
    (both written in one transaction per occurrence)."""
    slots = await stored.occurrences(resources.store, reminder_id)
    rows = await resources.store.fetchall("SELECT payload FROM events WHERE type = 'ReminderDue'")
    due = [decode(row[0]) for row in rows]
    fired = sorted(e.scheduled_for for e in due if isinstance(e, ReminderDue))
    return [s.isoformat() for s in slots], [f.isoformat() for f in fired]


async def lag_then_kill(cluster: RedisCluster, victim: RedisServer, stream: str) -> RedisServer:
    """Cut the victim's replica off (frozen, its link dropped) until the victim holds
    ``LOST`` more entries of ``stream`` than it, kill the victim, resume the replica;
    returns the replica. (A frozen replica alone would still get the writes: the kernel
    buffers them on its link. The link closed, the primary keeps them in its backlog.)"""
    replica = replica_of(cluster, victim)
    assert replica.process is not None
    with node_client(victim, cluster.password) as client:
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            await asyncio.to_thread(client.client_kill_filter, _type="replica")
            before = int(await asyncio.to_thread(client.xlen, stream))

            async def ahead() -> bool:
                return int(await asyncio.to_thread(client.xlen, stream)) >= before + LOST

            await wait_for(ahead, timeout=10, interval=0.005)
            victim.kill()
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
    return replica


async def promoted(cluster: RedisCluster, replica: RedisServer) -> float:
    """Until the replica is a primary and the cluster is ok again; the seconds it took."""
    started = time.monotonic()

    async def primary() -> bool:
        try:
            info = await asyncio.to_thread(role, replica, cluster.password)
        except redis.RedisError:
            return False
        return bool(info["role"] == "master")

    await wait_for(primary, timeout=30, interval=0.05)
    await asyncio.to_thread(cluster.wait_ready, 30)
    return time.monotonic() - started


def answered(load: Load) -> Counter[str]:
    """The events the history must hold for what the API answered, by type."""
    return Counter(
        LinkVisited=load.links.ledger.total,
        ArticleViewed=sum(load.ledger.views.values()),
        UserRegistered=len(load.ledger.users),
    )


async def drained(resources: Resources, load: Load) -> None:
    """Until the history holds what was answered (the API commits a visit just after
    its 302), then until every group has settled on every partition: the counts are
    final then, and compared exactly. The drain may take long on a loaded machine; it
    fails 40 s (stretched) after what is left last changed."""

    async def recorded() -> bool:
        return await history(resources) >= answered(load)

    left: list[str] = []

    async def settled() -> bool:
        left[:] = await unsettled(resources)
        return not left

    async def what_is_left() -> list[str]:
        return list(left)

    await wait_for(recorded, timeout=10, interval=0.05)
    await wait_for(settled, timeout=40, interval=0.1, progress=what_is_left)


async def report(resources: Resources, smtp: SmtpServer, load: Load, logs: Path) -> str:
    """The numbers, as answered and as counted, and what the logs say."""
    ledger, links = load.ledger, load.links.ledger
    views, mails = await views_counted(resources), welcomes(smtp)
    rewinds = republished(logs)
    lines = [
        f"history: {dict(await history(resources))}, answered: {dict(answered(load))}",
        f"redirects answered 302: {links.total}, counted: {await visits_counted(resources, CODE)}",
        f"views answered counted: {sum(ledger.views.values())} {dict(ledger.views)},"
        f" counted: {sum(views.values())} {views}; repeats not counted: {ledger.repeats}",
        f"registered: {len(ledger.users)}, welcome mails: {sum(mails.values())}"
        f" to {len(mails)} addresses",
        f"relay rewinds (since, position): {rewinds},"
        f" {sum(p - s for s, p in rewinds)} events republished",
        f"unexpected answers: {dict(ledger.unexpected)}",
        f"not drained: {(await unsettled(resources))[:10]}",
    ]
    lines += [f"{name} log: {dict(counts)}" for name, counts in log_summary(logs).items()]
    return "\n".join(lines)


def status_json(config: Config) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "status", "--json"],
        env=child_env(config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


async def failover_under(
    load: Load,
    resources: Resources,
    cluster: RedisCluster,
    victim: RedisServer,
    smtp: SmtpServer,
    reminder_id: str,
) -> tuple[str, datetime]:
    """With ``load`` flowing: once every kind of effect came through, the victim's replica
    cut off, the victim killed, its replica promoted, and more traffic; how that went, and
    when the victim was killed."""
    keys = resources.keys
    stop = asyncio.Event()
    flowing = asyncio.create_task(load.until(stop, MAX_ROUNDS))
    try:

        async def flowing_through() -> bool:
            views = await views_counted(resources)
            return (
                all(views.get(a) for a in load.articles)
                and await visits_counted(resources, CODE) > 0
                and bool(smtp.messages())
                and bool(await stored.occurrences(resources.store, reminder_id))
            )

        await wait_for(flowing_through, timeout=30, interval=0.1)
        before = load.rounds
        stream = keys.stream("visits", keys.partition_of(CODE))
        replica = await lag_then_kill(cluster, victim, stream)
        killed_at, killed = load.rounds, utcnow()
        failover_s = await promoted(cluster, replica)
        promoted_at = load.rounds

        async def on_after() -> bool:
            return load.rounds >= promoted_at + 20

        await wait_for(on_after, timeout=30, interval=0.05)
    finally:
        stop.set()
        await flowing
    return (
        f"rounds: {load.rounds} ({before} before the replica was cut off, {killed_at} at the"
        f" kill, {promoted_at} at the promotion, {failover_s:.1f} s later)"
    ), killed


def alive(children: dict[str, Child]) -> dict[str, bool]:
    return {n: c.process is not None and c.process.poll() is None for n, c in children.items()}


async def test_a_primary_killed_under_traffic_loses_and_doubles_nothing(
    config: Config,
    resources: Resources,
    cluster: RedisCluster,
    smtp: SmtpServer,
    spawn: Callable[..., Child],
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    victim, articles = await choose(resources, cluster)
    children, base_url = await start_deployment(resources, spawn, logs, smtp)
    day = today()
    async with traffic(base_url) as links, aiohttp.ClientSession() as http:
        reminder = await every_second(http, base_url)
        load = Load(base_url, http, links, CODE, articles)
        started = time.monotonic()
        try:
            how, killed = await failover_under(load, resources, cluster, victim, smtp, reminder)
            print("\n" + how)
            stopped = time.monotonic()
            assert alive(children) == dict.fromkeys(children, True)
            for name in SCHEDULERS:
                children.pop(name).kill()  # the reminder's count is final now
            await drained(resources, load)
            print(
                f"traffic {stopped - started:.1f} s, drained {time.monotonic() - stopped:.1f} s"
                " after it stopped"
            )
        finally:
            print(await report(resources, smtp, load, logs))
        shown = await asyncio.to_thread(status_json, config)
        print(f"status: {shown['groups']}")

        assert alive(children) == dict.fromkeys(children, True)
        assert not load.ledger.unexpected
        kept = await history(resources)
        assert {kind: kept[kind] for kind in answered(load)} == answered(load)  # none lost
        assert await views_counted(resources) == dict(load.ledger.views)
        assert await visits_counted(resources, CODE) == links.ledger.total
        if today() == day:  # the day's statistics: visitors, referrers, browsers
            stats = await links.stats(CODE, f"?from={day}&to={day}")
            assert comparable(stats) == links.ledger.expected(CODE)
        assert welcomes(smtp) == Counter(load.ledger.users.values())  # one mail per user
        dead = {g["group"]: g["dead_letters"] for g in shown["groups"]}  # every partition's
        assert dead.keys() >= GROUPS.keys() and set(dead.values()) == {0}, dead
        assert (shown["relay_backlog"], shown["delayed"]) == (0, 0)
        assert republished(logs), "the relay never republished the tail the failover lost"

        # Every second from the first occurrence to the last fired once, through the kill.
        slots, due = await reminder_counts(resources, reminder)
        print(f"reminder: {len(slots)} occurrences from {slots[0]} to {slots[-1]}")
        assert due == slots
        first = datetime.fromisoformat(slots[0])
        assert slots == [(first + timedelta(seconds=i)).isoformat() for i in range(len(slots))]
        assert first < killed < datetime.fromisoformat(slots[-1])
