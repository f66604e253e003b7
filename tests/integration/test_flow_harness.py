"""A group with flow control in the in-process harness, and the deployment's word on its
limits: a drain handles every entry while one tenant never has more than its limit in
handling; a malformed override stops the worker at its start, naming the variable and
the group (docs/guides/write-an-app.md, "Flow control")."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from sluice.app import App, HandlerContext
from sluice.app.running import group_spec
from sluice.app.testing import open_harness, sluice_command
from sluice.config import Config, load_config
from sluice.errors import ConfigError
from sluice.flow.limiter import Limiter
from sluice.flow.spec import Flow, Rate, with_overrides
from sluice.process.resources import Resources
from tests.flow_app import APPS, ATTEMPTS, HANDLED, WorkQueued, most_at_once

pytestmark = pytest.mark.topologies("single", "cluster")


async def most(redis: Redis, tenant: str) -> int:
    """The most entries of ``tenant`` the handler saw in handling at once."""
    return int(await redis.get(most_at_once(tenant)) or 0)


async def test_a_drain_handles_every_entry_within_each_tenants_limit(
    make_config: Callable[..., Config], topology: str
) -> None:
    async with open_harness(make_config(apps=APPS)) as harness:
        async with harness.store.transaction() as tx:
            await tx.append(
                *(WorkQueued(tenant="a", item=f"a{i}", ms=20) for i in range(20)),
                *(WorkQueued(tenant="b", item=f"b{i}", ms=20) for i in range(2)),
            )
        await harness.drain()
        redis = harness.resources.redis
        assert await redis.scard(HANDLED) == 22
        # Waiting for a turn is no attempt: every entry was handled at its first.
        assert set((await redis.hgetall(ATTEMPTS)).values()) == {b"1"}
        limiter = Limiter(redis, harness.resources.keys, "throttled", Flow(key="tenant"), 1000)
        assert await limiter.waiting("a") == 0
        assert await most(redis, "a") <= 4
        if topology == "single":  # one read brings them all: four start, sixteen wait
            assert await most(redis, "a") == 4
            assert (await limiter.stats())["deferred"] == 16


async def test_a_drain_waits_for_a_rates_tokens(make_config: Callable[..., Config]) -> None:
    config = make_config(apps=APPS, throttled_key_rate="20/s")
    async with open_harness(config) as harness:
        async with harness.store.transaction() as tx:
            await tx.append(*(WorkQueued(tenant="a", item=f"a{i}", ms=0) for i in range(8)))
        started = time.monotonic()
        await harness.drain()
        assert await harness.resources.redis.scard(HANDLED) == 8
        # Two at once (the burst), then six more tokens at 20 a second.
        assert time.monotonic() - started >= 6 / 20 * 0.9


def test_overrides_win_and_a_malformed_one_names_the_variable_and_the_group() -> None:
    flow = Flow(key="tenant", concurrency=4, rate=Rate(10))
    env = {
        "SLUICE_WEB_HOOKS_KEY_CONCURRENCY": "2",
        "SLUICE_WEB_HOOKS_KEY_RATE": "600/min",
        "SLUICE_WEB_HOOKS_RATE": "5/s",
    }
    changed = with_overrides("web-hooks", flow, load_config(env))
    assert changed == Flow(
        key="tenant", concurrency=2, rate=Rate(600, per_seconds=60), total_rate=Rate(5)
    )
    off = {"SLUICE_WEB_HOOKS_KEY_CONCURRENCY": "0", "SLUICE_WEB_HOOKS_KEY_RATE": "0"}
    unlimited = with_overrides("web-hooks", flow, load_config(off))
    assert unlimited.concurrency is None and unlimited.rate is None
    for name, raw in (
        ("SLUICE_WEB_HOOKS_KEY_RATE", "fast"),
        ("SLUICE_WEB_HOOKS_RATE", "5/fortnight"),
        ("SLUICE_WEB_HOOKS_KEY_CONCURRENCY", "-1"),
    ):
        with pytest.raises(ConfigError) as caught:
            with_overrides("web-hooks", flow, load_config({name: raw}))
        assert name in str(caught.value)
        assert "'web-hooks'" in str(caught.value)


@pytest.mark.topologies("single")
async def test_a_worker_refuses_a_malformed_limit_at_its_start(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(apps=APPS)
    done = await sluice_command(
        config, "worker", "throttled", timeout=90, SLUICE_THROTTLED_KEY_RATE="lots"
    )
    assert done.returncode != 0
    assert "SLUICE_THROTTLED_KEY_RATE" in done.stderr, done.stderr
    assert "'throttled'" in done.stderr


def test_a_key_field_no_event_type_has_is_refused_at_the_start(
    resources: Resources,
) -> None:
    app = App("typo-test")
    group = app.group("typo", flow=Flow(key="tennant", concurrency=1))
    group.on(WorkQueued)(_nothing)
    with pytest.raises(ConfigError, match="Flow\\(key='tennant'\\): no event type"):
        group_spec(group, resources)


async def _nothing(event: WorkQueued, ctx: HandlerContext) -> None:
    """A handler that does nothing."""
