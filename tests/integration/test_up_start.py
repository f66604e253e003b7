"""What ``sluice up`` (``make run``) says as it starts: the URLs of what it serves, and
nothing else (docs/tutorial.md)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable

import aiohttp

from sluice.app.testing import child_env, patience
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
        sys.executable, "-m", "sluice", "up",
        env=child_env(config), stdout=asyncio.subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
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
