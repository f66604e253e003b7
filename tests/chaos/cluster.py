"""The chaos deployment's processes: the names of the children a chaos test runs, their
environment, and the ``Cluster`` that starts, kills and restarts them (the fixtures are in
``tests/chaos/conftest.py``)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import aiohttp

from sluice.app.assembly import default_apps
from sluice.app.testing import Child, child_env, wait_for
from sluice.builtin.accounts.mail import group as mail
from sluice.config import Config
from sluice.embedded.redis_server import free_port

# Each handler group run here and the aggregate streams it reads.
WORKER_STREAMS: dict[str, tuple[str, ...]] = {
    name: default_apps().aggregates[name] for name in (*default_apps().projections, mail.NAME)
}
WORKER_GROUPS = tuple(WORKER_STREAMS)
SCHEDULERS = ("scheduler-0", "scheduler-1")
APIS = ("api-0", "api-1")
# Reminders every few seconds; the built-in tasks keep their (rare) schedules.
CHAOS_ENV = {
    "SLUICE_REMINDER_MIN_INTERVAL": "1",
    "SLUICE_EXTRA_TASKS": "tests.integration.scheduler_tasks:tasks",
    "SLUICE_TASK_LOCK_TTL_MS": "1500",
    "TEST_LONG_CRON": "0 0 0 1 1 *",  # the helper module's slow task, out of the way
    "SLUICE_CODE_POOL_TARGET": "0",  # codes made on the spot: no refill competing for CPU
    # The traffic registers and logs in from one address without end: no per-address cap.
    "SLUICE_REGISTRATIONS_PER_CLIENT": "1000000",
    "SLUICE_LOGINS_PER_CLIENT": "1000000",
    # Every occurrence is mailed (checks.check_reminders): no per-user mail budget.
    "SLUICE_MAIL_USER_HOURLY": "0",
    "SLUICE_MAIL_USER_DAILY": "0",
}


def _args(name: str) -> list[str]:
    if name.startswith("api-"):
        return ["api"]
    if name.startswith("worker-"):
        group = name.removeprefix("worker-")
        return ["worker", group, "--consumer", f"chaos-{group}"]
    if name.startswith("scheduler-"):
        return ["scheduler"]
    return [name]  # relay


class Cluster:
    """Named child processes that a test starts, kills with SIGKILL and restarts."""

    def __init__(self, config: Config, logs: Path) -> None:
        self.env = child_env(config, **CHAOS_ENV)
        self.data_dir = config.data_dir
        self.separate_hosts = config.postgres
        self.logs = logs
        self.ports = {name: free_port() for name in APIS}
        self.children: dict[str, Child] = {}

    @property
    def names(self) -> list[str]:
        workers = [f"worker-{g}" for g in WORKER_GROUPS]
        return [*APIS, "relay", *workers, *SCHEDULERS]

    def url(self, api: str) -> str:
        return f"http://127.0.0.1:{self.ports[api]}"

    def start(self, name: str) -> Child:
        env = dict(self.env)
        if name in self.ports:
            env["SLUICE_PORT"] = str(self.ports[name])
        env["SLUICE_DATA_DIR"] = str(self.data_dir_of(name))
        child = Child(_args(name), env).start(log=self.logs / f"{name}.log")
        self.children[name] = child
        return child

    def data_dir_of(self, name: str) -> Path:
        return self.data_dir / "hosts" / name if self.separate_hosts else self.data_dir

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)

    def pid(self, name: str) -> int:
        return self.children[name].pid

    def kill(self, name: str) -> int:
        """SIGKILL ``name`` and reap it; returns the pid it had."""
        child = self.children[name]
        pid = child.pid
        child.kill()
        return pid

    def terminate(self, name: str) -> int | None:
        return self.children[name].terminate()

    def close(self) -> None:
        with contextlib.ExitStack() as stopping:  # every child, even if one fails to stop
            for child in self.children.values():
                stopping.callback(child.kill)

    async def wait_healthy(self, http: aiohttp.ClientSession, api: str) -> None:
        async def healthy() -> bool:
            try:
                async with http.get(f"{self.url(api)}/healthz") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(healthy, timeout=30, interval=0.05)
