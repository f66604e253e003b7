"""The in-process harness: a deployment's API, relay, groups, projections, delayed jobs
and tasks in the test's own event loop, run until nothing is pending.

Nothing is re-implemented: the routes are served by the API ``sluice api`` builds
(``create_app``), the committed events go through the real relay into a real Redis,
every group (projections and delayed jobs included) is read by the real consumer with
its handlers, retries and dead letters, jobs are fired by the scheduler's own runner and
tasks run by its task runner. What a test does not get is time and concurrency: each
``drain`` runs everything to the end, one batch after the other, and

- a retry runs at once, without its backoff (the attempts still count, and the last one
  still dead-letters);
- time moves only by ``advance``: delayed jobs fall due on the harness's clock, which
  the app's own ``utcnow()`` does not follow;
- cron tasks run when ``run_task`` says, never by their schedule; the built-in apps'
  scheduler services (reminders) do not run;
- there is one consumer per group and partition, no crash, no reclaim, no Redis or
  database outage: the process fixtures are for those;
- a group with flow control takes turns until nothing more is released, waiting for a
  rate's next token in real time when entries wait for one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from aiohttp import web
from aiohttp.test_utils import TestClient

from sluice.app.assembly import assemble
from sluice.app.jobs import fire_due, next_due
from sluice.app.loading import Apps
from sluice.app.testkit.deployment import Deployment
from sluice.app.testkit.served import ServedAsApi
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.consumers.handling import HeldBack
from sluice.consumers.recovery import RecoveryGate
from sluice.events import utcnow
from sluice.http.app_keys import TASKS
from sluice.process.resources import Resources
from sluice.projections.replay import rebuild
from sluice.records.deliveries import DeliveryLog
from sluice.relay.relay import Relay
from sluice.scheduler.one_shots import Due, OneShotRunner
from sluice.scheduler.runner import Runner
from sluice.streams.messages import Message
from sluice.streams.spec import GroupSpec, runtime_settings, with_deployment_timeout

NAME = "harness"  # the consumer, the scheduler and the task runner of the harness
# Past any backoff: a drain moves every retry waiting for its time at once.
NO_WAIT_MS = 2**53


@dataclass(frozen=True)
class Failure:
    """An entry a group gave up on (its dead letter): the group, the event, the
    deliveries it had and the exception of its last attempt."""

    group: str
    event_type: str
    event_id: str
    deliveries: int
    error: BaseException

    def __str__(self) -> str:
        return (
            f"{self.group} dead-lettered {self.event_type} {self.event_id} after"
            f" {self.deliveries} deliveries: {type(self.error).__name__}: {self.error}"
        )


class DeadLettered(AssertionError):
    """A drain ended with dead letters; ``failures`` says which, the first one's
    exception is this one's ``__cause__`` (its traceback is the handler's)."""

    def __init__(self, failures: tuple[Failure, ...]) -> None:
        super().__init__("; ".join(str(f) for f in failures))
        self.failures = failures


class TaskFailed(AssertionError):
    """A task run by ``run_task`` did not succeed: its run record's status and error."""


@dataclass(frozen=True)
class Drained:
    """What a drain did: events the relay published, delayed jobs fired, attempts
    retried and the entries dead-lettered."""

    published: int
    jobs_fired: int
    retried: int
    failures: tuple[Failure, ...]


@dataclass(frozen=True)
class TaskRun:
    """A task's run (its run record): ``status`` is ``succeeded`` unless ``run_task``
    was told not to raise."""

    id: str
    task: str
    status: str
    error: str | None
    trace_id: str


class Harness(Deployment):
    """A deployment in one event loop (see the module docstring): ``client`` calls its
    routes (an aiohttp test client, ``await h.client.post("/v1/orders", json=...)``),
    ``drain`` runs what they committed until nothing is pending, ``advance`` moves the
    clock of delayed jobs, ``run_task`` runs a cron task now, ``replay`` rebuilds a
    projection; ``events``, ``handled`` and ``dead_letters`` read the outcome. Made by
    ``open_harness`` (or the ``sluice_harness`` fixture)."""

    def __init__(
        self,
        resources: Resources,
        apps: Apps,
        client: TestClient[web.Request, web.Application],
        specs: Mapping[str, GroupSpec],
    ) -> None:
        super().__init__(resources, apps)
        self.client = client
        self._offset = timedelta()
        self._failures: list[Failure] = []
        config = resources.config
        self._relay = Relay(
            resources.store,
            resources.redis,
            resources.keys,
            batch=config.relay_batch,
            retention_s=config.stream_retention,
            groups={name: spec.aggregates for name, spec in specs.items()},
        )
        # What the groups hold (their deps' close), let go as a worker does at its stop.
        self._closes = [spec.close for spec in specs.values() if spec.close is not None]
        self._deliveries = deliveries = DeliveryLog(resources.store)
        settings = replace(runtime_settings(config), block_ms=None)  # reads return at once
        gate, self._stop = RecoveryGate(), asyncio.Event()
        redis, keys, stop = resources.redis, resources.keys, self._stop
        self._consumers = [
            Consumer(spec, redis, keys, NAME, settings, p, gate, deliveries, stop=stop)
            for spec in (self._recording(s) for s in specs.values())
            for p in keys.numbers
        ]
        due = Due("delayed jobs", next_due, fire_due)
        self._jobs = OneShotRunner(resources, holder=NAME, due=due, clock=self.now)
        self._tasks = Runner(resources, holder=NAME, clock=self.now)

    @property
    def url(self) -> str:
        """The API's base URL (``http://127.0.0.1:PORT``), for another HTTP client."""
        return str(self.client.make_url("")).rstrip("/")

    def now(self) -> datetime:
        """The harness's clock: the real time, plus what ``advance`` added."""
        return utcnow() + self._offset

    async def drain(self, *, timeout: float = 30.0, raise_dead_letters: bool = True) -> Drained:
        """Run everything pending to its end: due delayed jobs fired, committed events
        published, every group's entries handled (retries at once), again until a round
        finds nothing to do. Raises ``DeadLettered`` if an entry went to the dead letters
        (unless ``raise_dead_letters`` is False: ``Drained.failures`` lists them), and
        ``TimeoutError`` if work is still coming after ``timeout`` seconds (a handler
        that appends what it handles, without end)."""
        published = fired = retried = 0
        failed = len(self._failures)
        # Nothing is cancelled at the deadline: the round in hand ends, and a consumer
        # holding entries through an outage lets them go (HeldBack) as a stopping worker does.
        deadline = asyncio.get_running_loop().call_later(timeout, self._stop.set)
        try:
            while True:
                jobs, sent = await self._fire_jobs(), await self._publish()
                handled, moved = await self._consume(), await self._move_retries()
                turned = await self._take_turns()
                published, fired, retried = published + sent, fired + jobs, retried + moved
                if not (jobs or sent or handled or moved or turned):
                    break
                if self._stop.is_set():
                    raise HeldBack("past the drain's deadline")
        except HeldBack:
            raise TimeoutError(
                f"still busy after {timeout} s of draining: a handler that appends what it"
                " handles without end, or one waiting for a service that does not answer"
                f" ({published} events published, {retried} retries so far)"
            ) from None
        finally:
            deadline.cancel()
            self._stop.clear()
        failures = tuple(self._failures[failed:])
        if failures and raise_dead_letters:
            raise DeadLettered(failures) from failures[0].error
        return Drained(published, fired, retried, failures)

    async def advance(self, by: timedelta | float) -> Drained:
        """Move the harness's clock ``by`` (seconds, or a ``timedelta``) and drain: the
        delayed jobs due by then fire and run."""
        self._offset += by if isinstance(by, timedelta) else timedelta(seconds=by)
        return await self.drain()

    async def run_task(self, name: str, *, raise_failure: bool = True) -> TaskRun:
        """Run the cron task ``name`` now, as ``sluice tasks run NAME`` does (a manual run,
        with its run record); raises ``TaskFailed`` if it did not succeed (unless
        ``raise_failure`` is False). What it committed is relayed by the next ``drain``."""
        tasks = self.client.app[TASKS]  # the process's tasks, as the API knows them
        task = tasks.get(name)
        if task is None:
            raise ValueError(f"no task {name!r}; the tasks: {', '.join(sorted(tasks))}")
        run = await self._tasks.begin(task, "manual", self.now())
        record = await self._tasks.execute(run)
        if record.status != "succeeded" and raise_failure:
            raise TaskFailed(f"task {name} {record.status}: {record.error}")
        return TaskRun(record.id, record.task, record.status, record.error, record.trace_id)

    async def replay(self, projection: str) -> int:
        """Rebuild ``projection`` from the history and swap it in, as ``sluice replay NAME``
        does; how many events it applied."""
        found = self.apps.projections.get(projection)
        if found is None:
            known = ", ".join(sorted(self.apps.projections))
            raise ValueError(f"no projection {projection!r}; the projections: {known}")
        return (await rebuild(self.resources, found, progress=False)).events

    async def _fire_jobs(self) -> int:
        fired = self._jobs.counters.fired
        while True:
            before = self._jobs.counters.fired
            await self._jobs.tick()
            if self._jobs.counters.fired == before:
                return self._jobs.counters.fired - fired

    async def _publish(self) -> int:
        """Relay until nothing is left to send or to confirm; how many Redis took."""
        before = self._relay.published
        while await self._relay.run_once():
            pass
        return self._relay.published - before

    async def _consume(self) -> int:
        handled = 0
        for consumer in self._consumers:
            while n := await consumer.step():
                handled += n
        return handled

    async def _take_turns(self) -> int:
        """Entries of flow groups released to their retry streams (waiting for a
        rate's token when entries wait for one)."""
        released = 0
        for consumer in self._consumers:
            if consumer.flow is not None and consumer.partition == 0:
                released += await consumer.flow.drain()
        return released

    async def _move_retries(self) -> int:
        moved = 0
        for consumer in self._consumers:
            moved += await consumer.failures.move_due(until_ms=NO_WAIT_MS)
        return moved

    def _recording(self, spec: GroupSpec) -> GroupSpec:
        """``spec``, its dead letters also noted for the drain that made them."""
        hook = spec.on_dead_letter

        async def noted(message: Message, error: BaseException) -> None:
            failure = Failure(spec.name, message.type, message.event_id, message.deliveries, error)
            self._failures.append(failure)
            if hook is not None:
                await hook(message, error)

        return replace(spec, on_dead_letter=noted)

    async def _start(self) -> None:
        for consumer in self._consumers:
            await consumer.ensure_groups()
            await consumer.step()  # its own pending list: empty, the reads are new from now
        await self._relay.sync_server()

    async def _close(self) -> None:
        await self._relay.close()
        await self._deliveries.flush()
        for close in self._closes:
            await close()


# The type of the ``sluice_harness`` fixture: ``await sluice_harness(apps, **settings)``.
HarnessFactory = Callable[..., Awaitable[Harness]]


@asynccontextmanager
async def open_harness(config: Config) -> AsyncIterator[Harness]:
    """The harness of ``config``'s deployment (its apps, store and Redis), open until the
    end of the block. Each drain writes in the store and Redis of ``config``: give it a
    database and a Redis prefix of its own (the ``sluice_harness`` fixture does)."""
    parts = assemble(config)
    apps = parts.apps
    async with AsyncExitStack() as stack:
        resources = await stack.enter_async_context(parts.open_resources())
        client = TestClient(ServedAsApi(parts.api()))
        await stack.enter_async_context(client)
        specs = {
            name: with_deployment_timeout(group(resources), config)
            for name, group in apps.groups.items()
        }
        harness = Harness(resources, apps, client, specs)
        await harness._start()
        stack.push_async_callback(harness._close)
        yield harness
