"""The faults: ``kill -9`` of each process kind, a Redis restart and a Redis outage.

A seeded plan fixes which faults happen, in which order and after which
pauses; the processes' own timing does the rest, so a replayed seed repeats
the plan, not every interleaving. Faults follow each other (the next starts
once the previous one was repaired), each after a random pause while the
traffic keeps running, so it lands at a random moment of the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import aiohttp

from sluice.app.testing import patience, wait_for
from sluice.builtin.accounts.mail.idempotency import stamp
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION
from tests.chaos.cluster import APIS, SCHEDULERS, WORKER_GROUPS, WORKER_STREAMS, Cluster
from tests.chaos.traffic import Api, Ledger
from tests.integration.faults_helpers import pending_of

PAUSE_S = (1.5, 4.0)  # traffic time before each fault
# How long a worker kill waits for the worker to hold un-acked entries. Mostly less than
# a second; but after a relay kill nothing is published until the restarted relay takes
# the relay lock over, once the dead one's lock has expired (its TTL is 10 s), and after
# a Redis fault the workers reconnect with a backoff of up to 5 s.
MID_BATCH_WAIT_S = 30.0


@dataclass
class Injected:
    kind: str  # worker, relay, api, scheduler, redis-restart, redis-outage
    target: str
    started: float  # time.time() of the kill or stop
    repaired: float  # time.time() when restarted or back
    pid: int | None = None
    detail: str = ""  # what the kill interrupted
    pending: int | None = None  # worker kills: entries it held un-acked when killed


class Faults:
    def __init__(
        self,
        cluster: Cluster,
        apis: list[Api],
        resources: Resources,
        redis_server: RedisServer,
        http: aiohttp.ClientSession,
        ledger: Ledger,
        *,
        rng: random.Random,
        outage_s: float,
    ) -> None:
        self.cluster = cluster
        self.apis = {api.name: api for api in apis}
        self.resources = resources
        self.redis_server = redis_server
        self.http = http
        self.ledger = ledger
        self.rng = rng
        self.outage_s = outage_s
        self.injected: list[Injected] = []
        self.mail_leases_expired = 0
        self._relay_started_at_position = 0

    def plan(self) -> list[tuple[str, str]]:
        """Every worker group once, the relay twice, one API, one scheduler, both Redis faults."""
        faults = [("worker", f"worker-{group}") for group in WORKER_GROUPS]
        faults += [("relay", "relay"), ("relay", "relay")]
        faults += [("api", self.rng.choice(APIS)), ("scheduler", self.rng.choice(SCHEDULERS))]
        faults += [("redis-restart", "redis"), ("redis-outage", "redis")]
        self.rng.shuffle(faults)
        return faults

    async def run(self) -> None:
        for kind, target in self.plan():
            await asyncio.sleep(self.rng.uniform(*PAUSE_S))  # the fault's random moment
            if kind in ("worker", "scheduler"):
                await self._kill_and_restart(kind, target)
            elif kind == "relay":
                await self._kill_relay()
            elif kind == "api":
                await self._kill_api(self.apis[target])
            else:
                await self._redis(kind)

    def summary(self) -> str:
        counts = Counter(f.kind for f in self.injected)
        names = {
            "worker": "kill -9 worker",
            "relay": "relay",
            "api": "api",
            "scheduler": "scheduler",
            "redis-restart": "redis restart",
            "redis-outage": f"redis outage {self.outage_s:g} s",
        }
        parts = [f"{names[kind]} x{counts[kind]}" for kind in names if counts[kind]]
        return f"faults injected: {len(self.injected)} ({', '.join(parts)})"

    def redis_down(self) -> list[tuple[float, float]]:
        """(stopped, back) of every Redis fault."""
        return [(f.started, f.repaired) for f in self.injected if f.kind.startswith("redis")]

    def scheduler_kills(self) -> list[Injected]:
        return [f for f in self.injected if f.kind == "scheduler"]

    async def _kill_and_restart(self, kind: str, name: str) -> None:
        pending: int | None = None
        if kind == "worker":
            started, pid, pending = await self._kill_worker_mid_batch(name)
            detail = f"{pending} entries pending"
        else:
            started = time.time()
            pid, detail = self.cluster.kill(name), ""
        if name == "worker-mail":
            await self._expire_orphaned_mail_leases()
        self.cluster.start(name)
        self.injected.append(Injected(kind, name, started, time.time(), pid, detail, pending))

    async def _kill_worker_mid_batch(
        self, name: str, timeout: float = MID_BATCH_WAIT_S
    ) -> tuple[float, int, int]:
        """SIGKILL the worker while it holds entries it has not acked yet: (when, pid,
        entries pending at the kill).

        Polling the pending count and then killing would race the worker's ack (a
        batch is done in milliseconds). So once it holds entries it is frozen with
        SIGSTOP, the count read again while it cannot ack, and it is killed only if
        it still holds some; else it goes on (SIGCONT) and the wait goes on. Past
        ``timeout`` it is killed anyway (checks.check_mid_batch then fails: the
        kill interrupted nothing). The count is read once more after the kill: a
        dead worker acks nothing, so it is the count at the kill.
        """
        group = name.removeprefix("worker-")
        pid = self.cluster.pid(name)
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            if await self._pending_of(group) == 0:
                await asyncio.sleep(0.002)
                continue
            os.kill(pid, signal.SIGSTOP)
            try:
                await _stopped(pid)
                # An ack written just before the stop may still be on its way to Redis.
                await asyncio.sleep(0.01)
                holding = await self._pending_of(group) > 0
            except BaseException:
                os.kill(pid, signal.SIGCONT)  # never leave it frozen
                raise
            if holding:
                break
            os.kill(pid, signal.SIGCONT)
        started = time.time()
        assert self.cluster.kill(name) == pid
        return started, pid, await self._pending_of(group)

    async def _pending_of(self, group: str) -> int:
        """Entries the killed worker had read and not acked: its restart must finish them."""
        keys = self.resources.keys
        streams = [keys.stream(a) for a in WORKER_STREAMS[group]] + [keys.retry(group)]
        consumer = f"chaos-{group}"
        return sum([await pending_of(self.resources.redis, s, consumer, group) for s in streams])

    async def _expire_orphaned_mail_leases(self) -> None:
        """Stand in for the two-minute lease a killed mail worker may leave behind.

        A worker killed between reserving a mail key and recording ``sent``
        leaves the key reserved; nobody sends it until the lease (2 minutes)
        expires, by design (docs/design/mail.md). The only mail worker is dead now, so
        every reserved key is orphaned: its lease is moved into the past
        instead of waiting out the two minutes. The restarted worker then takes
        the key over and finds the ``.eml`` file (delivered) or writes it.
        """
        past = stamp(utcnow() - timedelta(seconds=1))
        async with self.resources.store.transaction() as tx:
            self.mail_leases_expired += await tx.execute(
                "UPDATE mail_sends SET lease_until = ? WHERE state = 'reserved'", (past,)
            )

    async def _kill_relay(self) -> None:
        """Kill the relay while it publishes: only once it has published since its last start."""
        store = self.resources.store

        async def publishing() -> bool:
            return await store.position(POSITION) > self._relay_started_at_position

        await wait_for(publishing, timeout=30)
        started = time.time()
        pid = self.cluster.kill("relay")
        self._relay_started_at_position = position = await store.position(POSITION)
        unpublished = f"{await store.max_seq() - position} events unpublished"
        self.cluster.start("relay")
        self.injected.append(Injected("relay", "relay", started, time.time(), pid, unpublished))

    async def _kill_api(self, api: Api) -> None:
        """Views and registrations stay in flight to it; its redirect traffic is drained first."""
        await quiesce_redirects(self.resources, api, self.ledger)
        await _registering(api)
        await asyncio.sleep(self.rng.uniform(0.02, 0.06))  # into its password hash, likely
        started = time.time()
        in_flight = f"{api.requests_in_flight} requests in flight"
        pid = self.cluster.kill(api.name)
        api.alive = False
        self.cluster.start(api.name)
        await self.cluster.wait_healthy(self.http, api.name)
        api.alive = api.redirects_open = True
        self.injected.append(Injected("api", api.name, started, time.time(), pid, in_flight))

    async def _redis(self, kind: str) -> None:
        # Stopped and started from the event loop's thread on purpose: the server
        # gets SIGTERM when the thread that started it ends (see redis_server), and
        # executor threads end. Each call blocks the loop for a fraction of a second.
        started = time.time()
        self.redis_server.stop()
        if kind == "redis-outage":
            await asyncio.sleep(self.outage_s)  # the outage itself: traffic goes on meanwhile
        self.redis_server.start()
        self.injected.append(Injected(kind, "redis", started, time.time()))


async def _stopped(pid: int, timeout: float = 5.0) -> None:
    """Until ``pid`` is stopped (state T in /proc): SIGSTOP takes effect asynchronously."""
    stat = Path(f"/proc/{pid}/stat")

    async def stopped() -> bool:
        return stat.read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")

    await wait_for(stopped, timeout=timeout, interval=0.001)


async def _registering(api: Api, timeout: float = 5.0) -> None:
    """Until a registration is in flight to ``api`` (its password hash takes a while), or
    ``timeout``: the kill then most likely lands in the middle of one."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await api.registering.wait()


async def committed_visits(resources: Resources, referrer_host: str) -> int:
    host = resources.store.dialect.payload_field("referrer_host")
    row = await resources.store.fetchone(
        f"SELECT COUNT(*) FROM events WHERE type = 'LinkVisited' AND {host} = ?", (referrer_host,)
    )
    return int(row[0]) if row else 0


async def quiesce_redirects(resources: Resources, api: Api, ledger: Ledger) -> None:
    """Stop redirects to ``api`` and wait until each 302 it answered is committed.

    A redirect answers before its visit is committed (group commit, a few
    ms); ``kill -9`` loses what is still buffered, which docs/concepts/index.md allows for
    redirects. Killing only a replica whose answered visits are all in the
    history keeps the redirect count exact, and it is still killed under
    load: views and registrations stay in flight to it.
    """
    api.redirects_open = False

    async def nothing_in_flight() -> bool:
        return api.redirects_in_flight == 0

    await wait_for(nothing_in_flight)
    answered = sum(n for (_, index), n in ledger.redirects.items() if index == api.index)

    async def all_committed() -> bool:
        return await committed_visits(resources, api.referrer_host) == answered

    await wait_for(all_committed)
