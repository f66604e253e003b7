"""``sluice api --processes 2`` (docs/design/redirects.md): two real API processes on one port under
a supervisor. Both serve it, one scrape counts the requests of both, a child killed with kill -9 is
restarted, and SIGTERM to the supervisor stops both with every visit committed."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import aiohttp
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.app.testing import Child, wait_answering, wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from sluice.process.resources import Resources
from tests.link_helpers import add_link

# Process management: what the store does for a redirect is the redirect tests' part.
pytestmark = pytest.mark.stores("sqlite")

CODE = "procs01"
TOKEN = "processes-admin-token-0123456789abcdef"


def listening(port: int) -> set[int]:
    """The pids listening on ``port``."""
    return {
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid
    }


async def redirects(url: str, n: int) -> int:
    """``n`` GETs of the link, each on a new connection (the kernel spreads connections
    over the processes, not requests); how many answered 302."""
    answered = 0
    for _ in range(n):
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
            http.get(f"{url}/{CODE}", allow_redirects=False) as response,
        ):
            answered += response.status == 302
    return answered


async def counted_redirects(url: str) -> float:
    """``sluice_http_requests_total`` of GET /{code} 302, from one scrape."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics", headers=headers) as r:
        assert r.status == 200
        text = await r.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "sluice_http_requests_total"
        and sample.labels == {"method": "GET", "route": "/{code}", "status": "302"}
    )


async def visits(resources: Resources) -> int:
    rows = await resources.store.fetchall(
        "SELECT COUNT(*) FROM events WHERE type = ?", (LinkVisited.__name__,)
    )
    return int(rows[0][0])


async def test_two_processes_share_a_port_are_restarted_and_stop_without_losing_visits(
    config: Config, resources: Resources, spawn: Callable[..., Child], tmp_path: Path
) -> None:
    await add_link(resources.store, CODE, "https://example.org/")
    port = free_port()
    log = tmp_path / "api.log"
    supervisor = spawn(
        "api", "--processes", "2", log=log, SLUICE_PORT=str(port), SLUICE_ADMIN_TOKEN=TOKEN
    )
    url = f"http://127.0.0.1:{port}"
    await wait_answering([url])

    async def both_listen() -> bool:
        return len(listening(port)) == 2

    await wait_for(both_listen, timeout=30)
    first = listening(port)
    assert supervisor.pid not in first  # the supervisor binds the port, never listens

    answered = await redirects(url, 60)
    assert answered == 60

    async def all_counted() -> bool:  # published by each process every second
        return await counted_redirects(url) == answered

    await wait_for(all_counted, timeout=10)

    async def all_committed() -> bool:
        return await visits(resources) == answered

    await wait_for(all_committed, timeout=10)

    victim = min(first)
    os.kill(victim, signal.SIGKILL)

    async def replaced() -> bool:
        now = listening(port)
        return len(now) == 2 and victim not in now

    await wait_for(replaced, timeout=30)
    assert len(listening(port) & first) == 1  # the other one served on meanwhile
    answered += await redirects(url, 40)
    assert answered == 100

    assert supervisor.process is not None
    supervisor.process.send_signal(signal.SIGTERM)
    assert await supervisor.wait() == 0
    assert listening(port) == set()
    assert await visits(resources) == answered  # SIGTERM loses nothing
    assert "api process died, restarting" in log.read_text()
    assert not any(psutil.pid_exists(pid) for pid in first - {victim})
