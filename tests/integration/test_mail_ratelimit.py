"""SLUICE_MAIL_RATE holds the pace across workers: it is one limit, shared through Redis.

The assertions read the limiter's own grants (Redis time) and the server's
arrival times; nothing here measures throughput against a wall clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from sluice.app.running import group_spec
from sluice.app.testing import wait_for
from sluice.builtin.accounts.mail import group as mail
from sluice.builtin.accounts.mail.ratelimit import Grant, RateLimiter
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.integration.mail_helpers import drained, register, smtp_server

pytestmark = pytest.mark.topologies("single", "cluster")

RATE = 5
# More mails than the cluster topology's 16 partitions: a partition's first mail goes
# to the consumer that blocked on it first (Redis serves blocked readers in order), so
# only a partition given two mails is sure to feed both workers.
MAILS = 17


class RecordingLimiter(RateLimiter):
    """The real limiter, keeping the slots it granted."""

    def __init__(self, limiter: RateLimiter) -> None:
        super().__init__(limiter.redis, limiter.key, limiter.rate)
        self.grants: list[float] = []

    async def acquire(self) -> Grant:
        grant = await super().acquire()
        self.grants.append(grant.at)
        return grant


async def test_two_workers_share_one_limit_of_mails_per_second(
    resources: Resources,
    make_config: Callable[..., Config],
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    # Both workers must get some: a batch of at most half what one stream holds (the
    # mails are spread over the partitions), so one reads on while the other sends.
    batch = max(1, min(4, MAILS // (2 * resources.keys.partitions)))
    with smtp_server() as server:
        config = make_config(smtp_url=server.url, mail_rate=RATE, worker_batch=batch)
        res = dataclasses.replace(resources, config=config)
        limiters = []
        workers: list[Consumer] = []
        for name in ("w1", "w2"):
            deps = mail.build_deps(res)
            limiter = RecordingLimiter(deps.mailer.limiter)
            limiters.append(limiter)
            deps = dataclasses.replace(
                deps, mailer=dataclasses.replace(deps.mailer, limiter=limiter)
            )
            workers.append(
                start_worker(spec=group_spec(mail.mail_group, res, deps), name=name, config=config)
            )
        # Both workers read new entries before the mails come: a worker still starting on
        # a loaded machine would otherwise find them all taken by the other. (A consumer
        # reads its own pending entries first, then sets ``_drained`` and reads new ones.)
        consumers = [c for w in workers for c in getattr(w, "consumers", [w])]

        async def both_reading() -> bool:
            return all(c._drained for c in consumers)

        await wait_for(both_reading)
        start_relay()
        await register(resources, MAILS)

        async def settled() -> bool:
            return await drained(resources)

        await wait_for(settled)
        arrivals = sorted(r.at for r in server.messages())

    assert len(arrivals) == MAILS
    assert all(limiter.grants for limiter in limiters), "both workers sent mail"
    grants = sorted(g for limiter in limiters for g in limiter.grants)
    assert len(grants) == MAILS
    # Evenly spaced slots: 17 mails at 5/s span at least 16 intervals of 0.2 s...
    assert grants[-1] - grants[0] >= (MAILS - 1) / RATE - 1e-3
    # ...and no window of one second holds more than 5 of them, across both workers.
    spans = [grants[i + RATE] - grants[i] for i in range(len(grants) - RATE)]
    assert min(spans) >= 1 - 1e-3
    # What the SMTP server saw (sends start at their slot, give or take scheduling).
    assert arrivals[-1] - arrivals[0] >= 2.0
