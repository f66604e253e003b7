"""Exactly one welcome mail under faults: kill -9 after the SMTP server accepted, Redis down at
registration, two workers racing over duplicated entries (docs/concepts/index.md,
docs/guides/mail.md).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator

import pytest
import redis

from sluice.app.running import group_spec
from sluice.app.testing import Child, wait_for
from sluice.builtin.accounts.mail import group as mail
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.embedded.redis_server import RedisServer
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION, Relay
from tests.integration.faults_helpers import pending_of
from tests.integration.mail_helpers import (
    GROUP,
    Received,
    SmtpServer,
    dead_letters,
    drained,
    register,
    sent_keys,
    smtp_server,
)

pytestmark = pytest.mark.topologies("single", "cluster")

NEVER_MS = "600000"  # no XAUTOCLAIM within the test: only the own pending list recovers


@pytest.fixture
def server() -> Iterator[SmtpServer]:
    with smtp_server() as running_server:
        yield running_server


async def until_drained(resources: Resources, timeout: float = 20.0) -> None:
    """Until the mail group has drained; ``timeout`` after the last mail it reserved or
    sent (a loaded machine sends them seconds apart, and that is no failure)."""

    async def settled() -> bool:
        return await drained(resources)

    async def mails() -> dict[str, str]:
        return await sent_keys(resources)

    await wait_for(settled, timeout=timeout, progress=mails)


async def until_published(resources: Resources) -> None:
    async def published() -> bool:
        return await resources.store.position(POSITION) == await resources.store.max_seq()

    await wait_for(published)


@pytest.mark.slow
@pytest.mark.topologies("single", "partitioned")  # stops or pauses the one Redis server
async def test_worker_killed_after_the_server_accepted_but_before_the_ack_sends_once(
    resources: Resources,
    redis_server: RedisServer,
    server: SmtpServer,
    start_relay: Callable[..., Relay],
    spawn: Callable[..., Child],
) -> None:
    """The kill lands after 250 and the recorded ``sent``, while the XACK cannot run.

    When the server accepts the DATA it first pauses every write to Redis
    (``CLIENT PAUSE ... WRITE``) and only then answers 250. The worker records
    ``sent`` in the database, then blocks in its XACK; the test sees ``sent``
    and kills it. The entry is still pending: the restarted worker gets it
    again from its own pending list and must not send a second mail.
    """
    accepted = threading.Event()

    def pause_acks(received: Received) -> None:
        if not accepted.is_set():
            with redis.Redis.from_url(redis_server.url) as client:
                client.client_pause(30_000, all=False)  # CLIENT PAUSE 30000 WRITE
            accepted.set()

    server.recorder.on_accept = pause_acks
    start_relay()
    await register(resources, 1)
    await until_published(resources)
    env = {"SLUICE_SMTP_URL": server.url, "SLUICE_CLAIM_IDLE_MS": NEVER_MS}
    worker = spawn("worker", GROUP, "--consumer", "c1", **env)
    try:

        async def recorded_sent() -> bool:
            return await sent_keys(resources) == {"welcome_u0000": "sent"}

        await wait_for(recorded_sent)
        worker.kill()
    finally:
        await resources.redis.client_unpause()
    assert accepted.is_set()
    users = resources.keys.stream("users", resources.keys.partition_of("u0000"))
    assert await pending_of(resources.redis, users, "c1", GROUP) == 1

    spawn("worker", GROUP, "--consumer", "c1", **env)
    await until_drained(resources)
    await register(resources, 1, start=1)  # the restarted worker goes on normally
    await until_drained(resources)
    assert sorted(r.message_id for r in server.messages()) == [
        "<welcome_u0000@localhost>",
        "<welcome_u0001@localhost>",
    ]
    assert await dead_letters(resources) == []


@pytest.mark.topologies("single", "partitioned")  # stops or pauses the one Redis server
async def test_a_registration_committed_while_redis_is_down_is_mailed_once_it_is_back(
    resources: Resources,
    make_config: Callable[..., Config],
    redis_server: RedisServer,
    server: SmtpServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(smtp_url=server.url)
    start_relay()
    start_worker(
        spec=group_spec(mail.mail_group, dataclasses.replace(resources, config=config)),
        config=config,
    )
    await register(resources, 1)

    async def first_mail() -> bool:
        return len(server.messages()) == 1

    await wait_for(first_mail)

    redis_server.stop()
    await register(resources, 1, start=1)  # committed: the registration would answer 201
    assert await resources.store.max_seq() == 2
    redis_server.start()

    await until_drained(resources)
    assert sorted(r.message_id for r in server.messages()) == [
        "<welcome_u0000@localhost>",
        "<welcome_u0001@localhost>",
    ]
    assert await dead_letters(resources) == []


async def test_two_workers_over_duplicated_entries_never_send_a_mail_twice(
    resources: Resources,
    make_config: Callable[..., Config],
    server: SmtpServer,
    start_worker: Callable[..., Consumer],
) -> None:
    """50 registrations, each published twice back to back, two consumers reading one at a time.

    The two copies of an event usually reach the two workers at the same
    moment, so both race for the same idempotency key. The rate limit is off:
    its spacing would otherwise let the first copy finish before the second
    even tries. No entry is reclaimed: on a loaded machine a mail can take over the
    suite's 1 s claim idle time, and the other worker would handle it a second time
    (its mail skipped, as it should be), which is another test's subject.
    """
    config = make_config(smtp_url=server.url, worker_batch=1, mail_rate=0, claim_idle_ms=60_000)
    users = await register(resources, 50)
    events = await resources.store.events_after(0, 100)
    doubled = [e for event in events for e in (event, event)]
    async with Relay(resources.store, resources.redis, resources.keys) as relay:
        await relay.publish(doubled)
    await resources.store.set_position(POSITION, events[-1].seq)

    res = dataclasses.replace(resources, config=config)
    workers = [
        start_worker(spec=group_spec(mail.mail_group, res), name=name, config=config)
        for name in ("w1", "w2")
    ]
    await until_drained(resources)

    message_ids = [r.message_id for r in server.messages()]
    assert len(message_ids) == 50
    assert sorted(message_ids) == sorted(f"<welcome_{u.user_id}@localhost>" for u in users)
    assert all(w.counters.handled > 0 for w in workers)
    assert sum(w.counters.handled for w in workers) == 100
    assert await dead_letters(resources) == []
    assert set((await sent_keys(resources)).values()) == {"sent"}
