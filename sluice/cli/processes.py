"""Each process kind as one coroutine that runs until ``stop`` is set, built from the
process's parts (``sluice.app.assembly.Parts``: its config and apps, loaded once)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable, Sequence

import structlog

from sluice.app.assembly import Parts
from sluice.consumers.consumer import Consumer
from sluice.consumers.recovery import RecoveryGate
from sluice.process.resources import redis_client
from sluice.records.deliveries import DeliveryLog
from sluice.records.group_history.sampler import HistorySampler
from sluice.records.pause import PauseWatch
from sluice.relay.relay import Relay
from sluice.streams.spec import GroupSpec, runtime_settings, with_deployment_timeout

log = structlog.get_logger(__name__)


def default_consumer_name() -> str:
    """Stable across restarts on one host, so a restarted worker finds its own pending list."""
    return socket.gethostname()


async def run_worker(
    parts: Parts, groups: Sequence[str], stop: asyncio.Event, consumer: str | None = None
) -> None:
    config, every = parts.config, parts.apps.groups
    unknown = sorted(set(groups) - set(every))
    if unknown:
        raise SystemExit(f"unknown handler group(s): {', '.join(unknown)}; known: {sorted(every)}")
    name = consumer or default_consumer_name()
    # The blocking reads need a socket timeout longer than their BLOCK.
    reader = redis_client(config, socket_timeout=config.worker_block_ms / 1000 + 5)
    try:
        async with parts.open_resources() as resources:
            settings, keys, gate = runtime_settings(config), resources.keys, RecoveryGate()
            deliveries = DeliveryLog(resources.store)
            # Read before the first read of any consumer: a paused group stays paused.
            pauses = PauseWatch(resources.store)
            await pauses.refresh()
            # A consumer per group and partition: each partition's reads touch one slot.
            specs = {g: with_deployment_timeout(every[g](resources), config) for g in groups}
            consumers = [
                Consumer(
                    specs[g],
                    reader,
                    keys,
                    name,
                    settings,
                    partition,
                    gate,
                    deliveries,
                    pauses,
                )
                for g in groups
                for partition in keys.numbers
            ]
            log.info("worker started", groups=list(groups), consumer=name)
            # One consumer failing stops the others before the store closes under them,
            # and the process exits with the failure (its supervisor restarts it).
            # The history's last sample is taken once the consumers have finished.
            finished = asyncio.Event()
            sampler = HistorySampler(resources.redis, keys, consumers)
            sampling = asyncio.create_task(sampler.run(finished))
            try:
                async with asyncio.TaskGroup() as running:
                    for each in consumers:
                        running.create_task(each.run(stop))
                    running.create_task(pauses.run(stop))
            finally:
                finished.set()
                await sampling
                await _close_groups(specs.values())
            await deliveries.flush()  # what a refused write kept, if the database is back
    finally:
        await reader.aclose()
    log.info("worker stopped", groups=list(groups))


async def _close_groups(specs: Iterable[GroupSpec]) -> None:
    """What each group holds (``GroupSpec.close``); one that fails is logged, the others
    are still closed."""
    for spec in specs:
        if spec.close is not None:
            try:
                await spec.close()
            except Exception:
                log.exception("handler group not closed cleanly", group=spec.name)


async def run_relay(parts: Parts, stop: asyncio.Event) -> None:
    config = parts.config
    async with parts.open_resources() as resources:
        relay = Relay(
            resources.store,
            resources.redis,
            resources.keys,
            batch=config.relay_batch,
            poll_ms=config.relay_poll_ms,
            retention_s=config.stream_retention,
            groups=parts.apps.aggregates,
        )
        resources.store.add_commit_listener(relay.wake.set)
        log.info("relay started")
        await relay.run(stop)
    log.info("relay stopped", published=relay.published)


async def run_scheduler(parts: Parts, stop: asyncio.Event) -> None:
    """Cron tasks, apps' delayed jobs and the apps' scheduler services (the reminders
    app's cron and one-shot reminders); run any number of these."""
    from sluice.app.job_flow import JobFlow
    from sluice.scheduler.loop import Scheduler
    from sluice.scheduler.one_shots import OneShotRunner

    tasks = parts.tasks()
    services = parts.apps.scheduler_services
    async with parts.open_resources() as resources:
        scheduler = Scheduler(resources, list(tasks.values()))
        config = parts.config
        flow = JobFlow.of(
            parts.apps.jobs.values(), config.job_group_backlog, config.job_priority_aging_seconds
        )
        jobs = OneShotRunner(resources, holder=scheduler.holder, due=flow.due())
        await asyncio.gather(
            scheduler.run(stop),
            jobs.run(stop),
            *(service(resources, scheduler.holder).run(stop) for service in services),
        )


async def run_api(
    parts: Parts,
    stop: asyncio.Event,
    listening: asyncio.Event | None = None,
    *,
    reuse_port: bool = False,
) -> None:
    """The HTTP API; ``reuse_port``: one of ``sluice api --processes``'s children."""
    from sluice.http import listen

    config = parts.config
    runner, _ = await listen(parts.api(), reuse_port=reuse_port)
    try:
        url = f"http://{config.host}:{config.port}"
        log.info("api listening", url=url, docs=f"{url}/docs")
        if listening is not None:
            listening.set()
        await stop.wait()
    finally:
        await runner.cleanup()


async def run_all(
    parts: Parts, stop: asyncio.Event, listening: asyncio.Event | None = None
) -> None:
    """API, relay, every handler group and the scheduler in one process (``sluice up``),
    each built from the same ``parts``."""
    groups = sorted(parts.apps.groups)
    tasks = [
        asyncio.create_task(run_api(parts, stop, listening), name="api"),
        asyncio.create_task(run_relay(parts, stop), name="relay"),
        asyncio.create_task(run_worker(parts, groups, stop), name="workers"),
        asyncio.create_task(run_scheduler(parts, stop), name="scheduler"),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                log.error("component failed, stopping", component=task.get_name())
                stop.set()
                raise task.exception()  # type: ignore[misc]
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
