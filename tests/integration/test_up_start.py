"""What ``sluice up`` (``make run``) says as it starts: the URLs of what it serves, and
nothing else; and, on a port something already listens on, one line saying so before it
generates (and prints) the admin token or starts anything (docs/tutorial.md)."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator

import aiohttp
import pytest

from sluice.app.testing import child_env, patience, sluice_command
from sluice.config import Config
from sluice.embedded.redis_server import free_port

ADMIN_TOKEN = "up-start-admin-token-of-forty-characters"


async def _banner(process: asyncio.subprocess.Process) -> list[str]:
    """What ``sluice up`` printed up to its last line of start, ``press Ctrl-C to stop``."""
    assert process.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(patience(60)):
        while line := (await process.stdout.readline()).decode():
            lines.append(line.rstrip("\n"))
            if line.startswith("press Ctrl-C"):
                return lines
    raise AssertionError(f"sluice up ended before it was up: {lines}")


async def test_without_the_operations_app_up_names_no_operations_page(
    make_config: Callable[..., Config],
) -> None:
    port = free_port()
    config = make_config(apps="links,accounts", port=port, admin_token=ADMIN_TOKEN)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sluice",
        "up",
        env=child_env(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        printed = await _banner(process)
        url = f"http://127.0.0.1:{port}"
        assert printed[0].startswith(f"sluice is up: {url}  (redis: ")
        assert printed[1:] == [f"API docs: {url}/docs", "press Ctrl-C to stop"]
        async with aiohttp.ClientSession(url) as http:
            async with http.get("/docs") as docs:
                assert docs.status == 200
            async with http.get("/admin") as admin:  # not served: a short link's path
                assert admin.status == 404
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(patience(30)):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.fixture(params=["a program", "another sluice api --processes"])
def taken_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A loopback port something listens on: a plain server, or a sluice API of several
    processes (``SO_REUSEPORT``, which a second such socket could share)."""
    with socket.socket() as taken:
        if request.param != "a program":
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


async def test_up_on_a_port_in_use_stops_at_once_before_the_token_and_redis(
    make_config: Callable[..., Config], taken_port: int
) -> None:
    # No SLUICE_REDIS_URL: up would start its embedded Redis; no admin token yet.
    config = make_config(port=taken_port, redis_url=None)
    done = await sluice_command(config, "up", timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""  # no token shown, nothing started
    [said] = done.stderr.splitlines()
    found = re.fullmatch(
        f"sluice: port {taken_port} on 127.0.0.1 is in use \\(by another program, or another"
        r" sluice\): set SLUICE_PORT to a free one, such as SLUICE_PORT=(\d+)",
        said,
    )
    assert found is not None, said
    assert taken_port < int(found[1]) <= taken_port + 100  # one free when it was said
    assert not (config.data_dir / "admin.token").exists()
    assert not (config.data_dir / "redis").exists()
