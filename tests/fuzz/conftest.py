"""A real API for the fuzz run: ``create_app(config)`` served on a loopback port from a
thread, on this module's own redis-server, with a user, a link, a reminder and an
export already made, so the fuzzer reaches past 401 and 404."""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Callable, Coroutine, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from sluice.app.assembly import create_app
from sluice.builtin.accounts.stored import insert_token
from sluice.config import Config, load_config
from sluice.embedded.redis_server import RedisServer, free_port
from sluice.events import utcnow
from sluice.http import listen
from sluice.http.app_keys import STORE
from tests.fuzz.helpers import ADMIN_TOKEN, Seed


class ServedApp:
    """The app on its own event loop in a thread, like ``sluice api`` but in-process."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.app = create_app(config)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="fuzz-api", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start()/stop() in the test's thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner, _ = await listen(self.app)  # as `sluice api` listens
        try:
            self._ready.set()
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(60) or self._error is not None:
            raise RuntimeError(f"the API did not start: {self._error!r}")

    def run(self, coro: Coroutine[object, object, object]) -> object:
        """Run ``coro`` on the app's loop (its store is bound to it) and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
        if self._error is not None:
            raise self._error


def _token_factory(app: ServedApp, user_id: str) -> Callable[[], str]:
    def fresh_token() -> str:
        token = secrets.token_urlsafe(32)
        now = utcnow()
        app.run(insert_token(app.app[STORE], token, user_id, now, now + timedelta(hours=1)))
        return token

    return fresh_token


def _seed(app: ServedApp) -> Seed:
    base_url = app.config.base_url
    with requests.Session() as http:
        credentials = {"email": "fuzz@example.org", "password": "fuzz-password-1"}
        http.post(f"{base_url}/v1/users", json=credentials, timeout=30).raise_for_status()
        answer = http.post(f"{base_url}/v1/tokens", json=credentials, timeout=30)
        answer.raise_for_status()
        token = answer.json()["token"]
        user = {"Authorization": f"Bearer {token}"}
        me = http.get(f"{base_url}/v1/me", headers=user, timeout=30)
        me.raise_for_status()
        seed = Seed(base_url, token, _token_factory(app, me.json()["id"]))
        link = http.post(
            f"{base_url}/v1/links",
            headers=user,
            timeout=30,
            json={"url": "https://example.org/fuzz", "alias": "fuzzed"},
        )
        link.raise_for_status()
        seed.codes.append(link.json()["code"])
        http.get(f"{base_url}/fuzzed", allow_redirects=False, timeout=30).raise_for_status()
        job = http.post(f"{base_url}/v1/links/fuzzed/exports", headers=user, timeout=30)
        job.raise_for_status()
        seed.job_ids.append(job.json()["job_id"])
        reminder = http.post(
            f"{base_url}/v1/reminders",
            headers=user,
            timeout=30,
            json={"cron": "0 0 9 * * MON-FRI", "timezone": "Europe/Berlin", "text": "fuzz"},
        )
        reminder.raise_for_status()
        seed.reminder_ids.append(reminder.json()["id"])
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        tasks = http.get(f"{base_url}/v1/admin/tasks", headers=admin, timeout=30)
        tasks.raise_for_status()
        seed.task_names.extend(task["name"] for task in tasks.json())
    return seed


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seed]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    with RedisServer(tmp / "redis") as redis_server:
        port = free_port()
        config = load_config(
            {},
            data_dir=tmp / "data",
            redis_url=redis_server.url,
            host="127.0.0.1",
            port=port,
            admin_token=ADMIN_TOKEN,
            log_format="json",
            log_level="critical",
            visitor_key="fuzz-visitor-key",
            code_pool_target=500,
            # The per-address limits would soon answer every login, registration and
            # admin call from this one address 429 (documented, and tested in tests/api):
            # high, so the fuzzer keeps reaching past them.
            logins_per_client=1_000_000,
            registrations_per_client=1_000_000,
            admin_failures_per_client=1_000_000,
        )
        app = ServedApp(config)
        app.start()
        try:
            yield _seed(app)
        finally:
            app.stop()
