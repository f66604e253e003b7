"""The in-process engine of the integration and browser tests: the test's resources, and
factories that start a relay, workers and reminder runners on them, stopped after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any, cast

import pytest

from sluice.app.assembly import loaded_apps, open_resources
from sluice.app.testing import wait_for
from sluice.builtin.reminders.cron_runner import ReminderRunner
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.consumers.recovery import RecoveryGate
from sluice.process.resources import Resources, redis_client
from sluice.records.deliveries import DeliveryLog
from sluice.relay.relay import Relay
from sluice.streams.spec import Counters, GroupSpec, runtime_settings
from tests.integration.helpers import Running


@pytest.fixture
async def resources(config: Config) -> AsyncIterator[Resources]:
    async with open_resources(config) as res:
        yield res


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    tasks = Running()
    try:
        yield tasks
    finally:
        await tasks.close()


@pytest.fixture
def start_relay(resources: Resources, running: Running) -> Callable[..., Relay]:
    def start(**options: Any) -> Relay:
        config = resources.config
        relay = Relay(
            resources.store,
            resources.redis,
            resources.keys,
            batch=options.get("batch", config.relay_batch),
            poll_ms=options.get("poll_ms", config.relay_poll_ms),
            retention_s=config.stream_retention,
            groups=options.get("groups"),
        )
        resources.store.add_commit_listener(relay.wake.set)
        running.start(relay.run(running.stop))
        return relay

    return start


class Partitioned:
    """A group's consumers, one per partition, seen as one: counters summed, the rest
    (its name, settings, spec) the first one's."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = consumers

    @property
    def counters(self) -> Counters:
        total = Counters()
        for consumer in self.consumers:
            for name in ("handled", "retried", "dead", "claimed"):
                setattr(total, name, getattr(total, name) + getattr(consumer.counters, name))
        return total

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumers[0], name)


@pytest.fixture
async def start_worker(
    resources: Resources, running: Running
) -> AsyncIterator[Callable[..., Consumer]]:
    clients = []

    def start(
        group: str = "article-views",
        name: str = "w1",
        spec: GroupSpec | None = None,
        config: Config | None = None,
    ) -> Consumer:
        cfg = config or resources.config
        reader = redis_client(cfg, socket_timeout=cfg.worker_block_ms / 1000 + 5)
        clients.append(reader)
        spec = spec or loaded_apps(cfg).groups[group](resources)  # the config's apps
        gate = RecoveryGate()  # the consumers of one call are one process's
        deliveries = DeliveryLog(resources.store)  # recorded as a worker process does
        settings = replace(runtime_settings(cfg), handler_timeout_s=cfg.handler_timeout(spec.name))
        consumers = [
            Consumer(spec, reader, resources.keys, name, settings, partition, gate, deliveries)
            for partition in resources.keys.numbers
        ]
        for consumer in consumers:
            running.start(consumer.run(running.stop))
        return consumers[0] if len(consumers) == 1 else cast(Consumer, Partitioned(consumers))

    yield start
    # The consumers must stop before their clients close, or they reconnect and leak.
    await running.close()
    for client in clients:
        await client.aclose()


@pytest.fixture
async def start_runners(
    config: Config, running: Running
) -> AsyncIterator[Callable[..., Awaitable[list[ReminderRunner]]]]:
    """Start runners, each on its own Resources; they stop before those close."""
    async with AsyncExitStack() as stack:

        async def start(count: int = 3, **options: Any) -> list[ReminderRunner]:
            runners = []
            for i in range(count):
                resources = await stack.enter_async_context(open_resources(config))
                runner = ReminderRunner(resources, holder=f"runner-{i}", **options)
                running.start(runner.run(running.stop))
                runners.append(runner)
            for runner in runners:
                await wait_for(loaded(runner))
            return runners

        yield start
        await running.close()


def loaded(runner: ReminderRunner) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return runner.loaded.is_set()

    return done
