"""PostgreSQL databases for the tests: fresh copies of the migrated template, made one
ahead (``Databases``, behind the ``databases`` fixture of ``tests/conftest.py``) or on
the spot (``new_database``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import asyncpg

from sluice.embedded.postgres_server import PostgresServer

T = TypeVar("T")
TEMPLATE = "sluice_template"


class Databases:
    """Fresh copies of the migrated template, made one ahead by a thread of their own
    on one kept connection (a copy takes tens of milliseconds), and dropped there once
    finished.

    A finished database is dropped only when the next one is taken: a test's own
    fixtures may still use it after ``database_url`` is torn down (pytest closes the
    aiohttp client, and with it the app and its visit writer, later).
    """

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-databases")
        self._thread.start()
        self._admin: asyncpg.Connection = self._run(asyncpg.connect(server.url()))
        self._next = self._submit(self._create(TEMPLATE))
        self._finished: list[str] = []

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._submit(coro).result()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _create(self, template: str, drop: Sequence[str] = ()) -> tuple[str, str]:
        """Drop ``drop``, then make a new database (one statement at a time: the
        connection is one)."""
        for old in drop:
            await self._admin.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
        name = f"t_{uuid.uuid4().hex[:16]}"
        await self._admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name, self.server.url(name)

    def take(self, template: str = TEMPLATE) -> tuple[str, str]:
        """A fresh database: (name, URL)."""
        drop, self._finished = self._finished, []
        if template == TEMPLATE:
            made = self._next.result()
            self._next = self._submit(self._create(TEMPLATE, drop))
            return made
        self._next.result()  # the connection is free; the one made ahead stays ready
        return self._run(self._create(template, drop))

    def finished(self, name: str) -> None:
        self._finished.append(name)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._next.result()
            self._run(self._admin.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def new_database(server: PostgresServer, template: str = TEMPLATE) -> tuple[str, str]:
    """A fresh database on ``server``: (name, URL)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    return name, server.create_database(name, template=template)
