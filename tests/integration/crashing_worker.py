"""A worker process whose handler kills it (SIGKILL) whenever a batch holds a poison event.

``python -m tests.integration.crashing_worker CONSUMER POISON_SOURCE``, with a
test's ``SLUICE_*`` settings in the environment (its apps among them: the engine's test
app, tests/engine_app): that app's real ``ping-counts`` projection group under the real
consumer runtime, built as ``sluice worker`` builds it
(``sluice.cli.processes.run_worker``), except that a batch holding a ping from
``POISON_SOURCE`` first records the delivery (``pid deliveries`` pushed to
``DELIVERIES_KEY``) and then kills its own process, as a segfault or the OOM
killer would: no ack, no cleanup.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from sluice.config import load_config
from sluice.telemetry.logs import configure_logging

DELIVERIES_KEY = "test:poison:deliveries"


async def work(consumer_name: str, poison: str) -> None:
    from sluice.app.assembly import loaded_apps, open_resources
    from sluice.consumers.consumer import Consumer
    from sluice.consumers.recovery import RecoveryGate
    from sluice.process.resources import redis_client
    from sluice.process.stop_signals import stop_on_signals
    from sluice.streams.messages import Delivery
    from sluice.streams.spec import GroupSpec, runtime_settings
    from tests.engine_app import Pinged

    config = load_config()
    configure_logging(config)
    stop = stop_on_signals()
    reader = redis_client(config, socket_timeout=config.worker_block_ms / 1000 + 5)
    try:
        async with open_resources(config) as resources:
            real = loaded_apps(config).groups["ping-counts"](resources)

            async def dies_on_poison(
                deliveries: Sequence[Delivery],
            ) -> Mapping[tuple[str, str], BaseException]:
                for d in deliveries:
                    if isinstance(d.event, Pinged) and d.event.source == poison:
                        entry = f"{os.getpid()} {d.message.deliveries}"
                        await resources.redis.rpush(DELIVERIES_KEY, entry)
                        os.kill(os.getpid(), signal.SIGKILL)
                return await real.handler(deliveries)

            spec = GroupSpec(real.name, real.aggregates, dies_on_poison, real.on_dead_letter)
            settings, gate = runtime_settings(config), RecoveryGate()
            consumers = [
                Consumer(spec, reader, resources.keys, consumer_name, settings, partition, gate)
                for partition in resources.keys.numbers
            ]
            await asyncio.gather(*(c.run(stop) for c in consumers))
    finally:
        await reader.aclose()


if __name__ == "__main__":
    asyncio.run(work(sys.argv[1], sys.argv[2]))
