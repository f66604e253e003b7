"""PostgreSQL crashing and coming back under traffic (docs/guides/several-hosts.md, "Database
down").

A server of this test's own, killed with SIGKILL (no checkpoint, crash
recovery at the restart) while an API, the relay and the workers run as real
processes and traffic flows. Redirects of a cached link never fail; writes
answer 503 with ``Retry-After`` while the database is away (never a 500);
afterwards every view, registration and redirect answered 2xx/3xx is counted,
the visits the API kept in memory included, and nothing else: a write answered
503 because its COMMIT lost the connection may have committed (its outcome
could not be known), and only those may appear beyond the answered ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from sluice.app.assembly import open_resources
from sluice.app.testing import Child, child_env, wait_answering, wait_for
from sluice.config import Config
from sluice.embedded.postgres_server import PostgresServer
from sluice.embedded.redis_server import free_port
from sluice.process.resources import Resources

pytestmark = [pytest.mark.slow, pytest.mark.stores("postgres")]

PASSWORD = "outage horse battery"
OUTAGE_S = 3.0


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="sluice-test-pg-outage-")))
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def outage_config(make_config: Callable[..., Config], own_postgres: PostgresServer) -> Config:
    return make_config(database_url=own_postgres.create_database("outage"))


class Traffic:
    """Loops of requests; every answer is tallied by kind and status."""

    def __init__(self, http: aiohttp.ClientSession, api: str, code: str) -> None:
        self.http, self.api, self.code = http, api, code
        self.answers: Counter[tuple[str, int]] = Counter()
        self.viewers: dict[str, int] = {}  # viewer -> status
        self.users: dict[str, int] = {}  # email -> status
        self.retry_after: set[str] = set()
        self.stop = asyncio.Event()

    async def _send(self, kind: str, method: str, path: str, **kwargs: object) -> int:
        async with self.http.request(method, f"{self.api}{path}", **kwargs) as response:  # type: ignore[arg-type]
            self.answers[(kind, response.status)] += 1
            if response.status == 503:
                self.retry_after.add(response.headers.get("Retry-After", ""))
            return response.status

    async def redirects(self) -> None:
        while not self.stop.is_set():
            await self._send("redirect", "GET", f"/{self.code}", allow_redirects=False)
            await asyncio.sleep(0.005)

    async def views(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            viewer = f"viewer-{n}"
            body = {"viewer": viewer}
            self.viewers[viewer] = await self._send(
                "view", "POST", "/v1/articles/a/views", json=body
            )
            await asyncio.sleep(0.01)

    async def registrations(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            user = {"email": f"outage{n}@example.org", "password": PASSWORD}
            self.users[user["email"]] = await self._send("register", "POST", "/v1/users", json=user)
            await asyncio.sleep(0.05)


@pytest.fixture
async def processes(outage_config: Config) -> AsyncIterator[str]:
    port = free_port()
    # Registrations every 50 ms from one address: no per-address cap on them here.
    env = child_env(outage_config, SLUICE_PORT=str(port), SLUICE_REGISTRATIONS_PER_CLIENT="1000000")
    children = [
        Child(args, env).start(log=outage_config.data_dir.parent / f"{args[-1]}.log")
        for args in (
            ["api"],
            ["relay"],
            ["worker", "link-stats"],
            ["worker", "article-views"],
            ["worker", "mail"],
        )
    ]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.ExitStack() as stops:  # each one stopped, even after one failed
            for child in children:
                stops.callback(child.terminate)


async def test_a_database_crash_under_traffic_loses_nothing_and_redirects_never_fail(
    outage_config: Config, own_postgres: PostgresServer, processes: str
) -> None:
    api = processes
    async with open_resources(outage_config) as resources, aiohttp.ClientSession() as http:
        await wait_answering([api])
        owner = {"email": "owner@example.org", "password": PASSWORD}
        async with http.post(f"{api}/v1/users", json=owner) as response:
            assert response.status == 201
        async with http.post(f"{api}/v1/tokens", json=owner) as response:
            token = (await response.json())["token"]
        auth = {"Authorization": f"Bearer {token}"}
        async with http.post(
            f"{api}/v1/links", json={"url": "https://example.org/"}, headers=auth
        ) as response:
            code = (await response.json())["code"]

        traffic = Traffic(http, api, code)
        loops = [traffic.redirects(), traffic.views(), traffic.registrations()]
        running = [asyncio.create_task(loop) for loop in loops]
        await asyncio.sleep(1.0)  # traffic before the crash
        own_postgres.kill()
        await asyncio.sleep(0.5)
        async with http.get(f"{api}/readyz") as response:
            assert response.status == 503
            assert "database" in await response.text()
        await asyncio.sleep(OUTAGE_S)
        own_postgres.start()
        await asyncio.sleep(2.0)  # traffic after the restart
        traffic.stop.set()
        await asyncio.gather(*running)

        statuses = {
            kind: sorted({s for k, s in traffic.answers if k == kind})
            for kind in ("redirect", "view", "register")
        }
        assert statuses["redirect"] == [302], traffic.answers
        assert set(statuses["view"]) <= {202, 503} and 503 in statuses["view"], traffic.answers
        assert set(statuses["register"]) <= {201, 503}, traffic.answers
        assert traffic.retry_after == {"5"}
        # Body viewers are kept as viewer:<as sent>.
        viewed = {
            v.removeprefix("viewer:")
            for v in await _committed(resources, "ArticleViewed", "viewer")
        }
        assert {v for v, status in traffic.viewers.items() if status == 202} <= viewed
        assert {traffic.viewers[v] for v in viewed} <= {202, 503}
        expected = {"redirects": traffic.answers[("redirect", 302)], "views": len(viewed)}
        found: dict[str, int] = {}

        async def counted() -> bool:
            async with http.get(f"{api}/v1/links/{code}/stats", headers=auth) as response:
                found["redirects"] = (await response.json())["total"]
            async with http.get(f"{api}/v1/articles/a") as response:
                found["views"] = (await response.json())["views"]
            return found == expected

        try:
            await wait_for(counted, timeout=60)
        except AssertionError:
            raise AssertionError(f"counted {found}, committed {expected}") from None
        rows = await resources.store.fetchall("SELECT email FROM users WHERE email LIKE 'outage%'")
        users = {str(r[0]) for r in rows}
        assert {e for e, status in traffic.users.items() if status == 201} <= users
        assert {traffic.users[e] for e in users} <= {201, 503}

        async def mailed() -> bool:
            row = await resources.store.fetchone(
                "SELECT COUNT(*) FROM mail_sends WHERE state = 'sent'"
            )
            return row == (len(users) + 1,)

        await wait_for(mailed, timeout=60)
        # Held through the outage, not failed: nothing reached a dead-letter stream.
        for group in ("link-stats", "article-views", "mail"):
            assert await resources.redis.xlen(resources.keys.dead(group)) == 0, group


async def _committed(resources: Resources, event_type: str, field: str) -> set[str]:
    """A field of every committed event of a type: the truth of what was written."""
    column = resources.store.dialect.payload_field(field)
    rows = await resources.store.fetchall(
        f"SELECT {column} FROM events WHERE type = ?", (event_type,)
    )
    return {str(row[0]) for row in rows}
