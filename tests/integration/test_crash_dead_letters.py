"""An entry that kills its worker process on every delivery reaches the dead letters.

No handler outcome is ever recorded for such an entry: the process dies before
it could retry or ack. Only Redis's own delivery counter (read when a restarted
worker drains its pending list) tells that the entry has been delivered again
and again, so after ``SLUICE_MAX_DELIVERIES`` deaths the restarted worker must
dead-letter it instead of handling it once more, and the other entries flow,
including those read in the same batch as it (a restarted worker handles the
entries it held one at a time, so only the killer is charged its deaths).

The worker is tests/integration/crashing_worker.py: the real ``ping-counts``
group of the engine's test app (tests/engine_app) and consumer runtime, whose handler
SIGKILLs its own process on a ping from the source ``poison``. It is restarted under
the same consumer name after each death, as a supervisor (systemd, compose) would
restart ``sluice worker``.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

import pytest

from sluice.app.testing import Child, child_env, wait_for
from sluice.config import Config
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION, Relay
from tests.engine_app import APPS
from tests.integration.crashing_worker import DELIVERIES_KEY
from tests.integration.faults_helpers import pending_of
from tests.integration.helpers import pings_counted, post_pings

pytestmark = [pytest.mark.topologies("single", "cluster"), pytest.mark.apps(APPS)]

GROUP = "ping-counts"
CONSUMER = "crasher"
MAX_DELIVERIES = 4  # not the default (5): the setting is what counts
FINE = 20  # pings from another source, 10 before the poison entry and 10 after it


@pytest.fixture
def workers() -> Iterator[list[Child]]:
    """Every start of the crashing worker; those still running are killed at teardown,
    even when the test failed (a live child would fail a later test's warnings)."""
    started: list[Child] = []
    yield started
    with contextlib.ExitStack() as stopping:  # every child, even if one fails to stop
        for child in started:
            stopping.callback(child.kill)


@dataclass
class Outcome:
    deaths: int
    worker: Child  # the start that lived: it dead-lettered the entry and went on
    poison_event_id: str


async def crash_until_dead_lettered(
    config: Config, resources: Resources, workers: list[Child], log: Path, **settings: str
) -> Outcome:
    """Commit the pings, then start the worker again after every death until the poison
    entry is dead-lettered (failing if it is still killing workers after more starts
    than ``MAX_DELIVERIES``)."""
    env = child_env(
        config,
        SLUICE_MAX_DELIVERIES=str(MAX_DELIVERIES),
        # Long: only a restart under the same name brings the entry back, no reclaim.
        SLUICE_CLAIM_IDLE_MS="60000",
        SLUICE_LOG_LEVEL="info",
        **settings,
    )
    await post_pings(resources, "fine", FINE // 2)
    await post_pings(resources, "poison", 1)
    await post_pings(resources, "fine", FINE // 2, start=FINE // 2)
    poison = await resources.store.fetchone(
        "SELECT event_id FROM events WHERE seq = ?", (FINE // 2 + 1,)
    )
    assert poison is not None

    async def published() -> bool:
        return await resources.store.position(POSITION) == await resources.store.max_seq()

    await wait_for(published)
    dead_key = resources.keys.dead(GROUP, resources.keys.partition_of("poison"))
    deaths = 0
    for _ in range(MAX_DELIVERIES + 3):
        worker = Child([CONSUMER, "poison"], env, module="tests.integration.crashing_worker")
        workers.append(worker)
        process = worker.start(log).process
        assert process is not None

        async def died_or_dead_lettered(process: Popen[bytes] = process) -> bool:
            return process.poll() is not None or await resources.redis.xlen(dead_key) > 0

        await wait_for(died_or_dead_lettered, timeout=20)
        if process.poll() is None:
            return Outcome(deaths, worker, str(poison[0]))
        assert process.returncode == -signal.SIGKILL, log.read_text()[-3000:]
        deaths += 1
    raise AssertionError(f"the poison entry still kills its worker after {deaths} deaths")


def others_handled(resources: Resources) -> Callable[[], Awaitable[bool]]:
    async def handled() -> bool:  # counted, and acked after their commit
        keys = resources.keys
        counted = await pings_counted(resources, "fine") == FINE
        streams = [keys.stream("pings", p) for p in keys.numbers]
        left = [await pending_of(resources.redis, stream, CONSUMER) for stream in streams]
        return counted and sum(left) == 0

    return handled


async def test_an_entry_killing_its_worker_on_every_delivery_is_dead_lettered(
    config: Config,
    resources: Resources,
    start_relay: Callable[..., Relay],
    workers: list[Child],
    tmp_path: Path,
) -> None:
    start_relay()
    # Batches of one: the poison entry is alone in its batch (see the test below).
    outcome = await crash_until_dead_lettered(
        config, resources, workers, tmp_path / "crasher.log", SLUICE_WORKER_BATCH="1"
    )

    await wait_for(others_handled(resources))
    assert outcome.worker.terminate() == 0

    assert outcome.deaths == MAX_DELIVERIES
    raw = await resources.redis.lrange(DELIVERIES_KEY, 0, -1)
    seen = [tuple(int(x) for x in entry.split()) for entry in raw]
    # Each death was one real delivery, counted as such by the runtime.
    assert [count for _, count in seen] == list(range(1, MAX_DELIVERIES + 1))
    assert len({pid for pid, _ in seen}) == MAX_DELIVERIES
    [(_, letter)] = await resources.redis.xrange(
        resources.keys.dead(GROUP, resources.keys.partition_of("poison"))
    )
    assert letter[b"event_id"].decode() == outcome.poison_event_id
    assert letter[b"group"] == GROUP.encode()
    assert b"without an outcome" in letter[b"error"]
    assert await pings_counted(resources, "poison") == 0
    assert await pings_counted(resources, "fine") == FINE


async def test_entries_batched_with_a_worker_killing_entry_are_still_handled(
    config: Config,
    resources: Resources,
    start_relay: Callable[..., Relay],
    workers: list[Child],
    tmp_path: Path,
) -> None:
    start_relay()
    # The default batch (100): the 21 entries are read, and die, together.
    outcome = await crash_until_dead_lettered(config, resources, workers, tmp_path / "crasher.log")
    assert outcome.deaths == MAX_DELIVERIES
    letters = await resources.redis.xrange(
        resources.keys.dead(GROUP, resources.keys.partition_of("poison"))
    )
    assert [f[b"event_id"].decode() for _, f in letters] == [outcome.poison_event_id], (
        f"{len(letters)} dead letters"
    )
    await wait_for(others_handled(resources))
    assert outcome.worker.terminate() == 0
    assert await pings_counted(resources, "fine") == FINE
    # The poison entry was charged once per death, as when alone in its batch.
    raw = await resources.redis.lrange(DELIVERIES_KEY, 0, -1)
    assert [int(entry.split()[1]) for entry in raw] == list(range(1, MAX_DELIVERIES + 1))
