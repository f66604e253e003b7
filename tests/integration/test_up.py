"""``sluice up`` on a bare data dir: embedded Redis, API, relay and workers in one command."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from sluice.redis_server import free_port
from tests.integration.conftest import wait_for


async def _read_until_up(process: asyncio.subprocess.Process, log: Path) -> list[str]:
    """What ``sluice up`` printed up to its URL line, inclusive."""
    assert process.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(30):
            while line := (await process.stdout.readline()).decode():
                lines.append(line.strip())
                if line.startswith("sluice is up: "):
                    return lines
    except TimeoutError:
        pass
    raise AssertionError(f"sluice up printed no URL; its log:\n{log.read_text()[-3000:]}")


def _nothing_listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
async def test_up_serves_article_views_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port, data = free_port(), tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(SLUICE_DATA_DIR=str(data), SLUICE_PORT=str(port), SLUICE_LOG_LEVEL="info")
    log = tmp_path / "up.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sluice", "up",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr,
        )  # fmt: skip
    try:
        printed = await _read_until_up(process, log)
        url = printed[-1].split()[3]
        assert url == f"http://127.0.0.1:{port}"
        [token_line] = [line for line in printed if line.startswith("admin token (shown once")]
        admin_token = token_line.rsplit(" ", 1)[1]
        token_file = data / "admin.token"
        assert token_file.read_text().strip() == admin_token
        assert token_file.stat().st_mode & 0o777 == 0o600
        announced = (data / "redis" / "url").read_text()
        async with aiohttp.ClientSession() as http:
            for viewer in ("ada", "bob", "ada"):
                body = {"viewer": viewer}
                async with http.post(f"{url}/v1/articles/intro/views", json=body) as response:
                    assert response.status == 202

            async def counted() -> bool:
                async with http.get(f"{url}/v1/articles/intro") as response:
                    return (await response.json())["views"] == 2

            async def ranked() -> bool:  # Redis gets the leaderboard right after the commit
                async with http.get(f"{url}/v1/articles/top?period=day") as response:
                    top = await response.json()
                return bool(top["items"] == [{"article_id": "intro", "views": 2}])

            await wait_for(counted)
            await wait_for(ranked)
            admin = {"Authorization": f"Bearer {admin_token}"}
            async with http.get(f"{url}/v1/admin/streams", headers=admin) as response:
                assert response.status == 200
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 30) == 0
        assert not (data / "redis" / "url").exists()
        redis_port = int(announced.rsplit(":", 1)[1].split("/")[0])
        assert _nothing_listens(redis_port), "the embedded Redis outlived sluice up"
        assert any(p.name.startswith("appendonly") for p in (data / "redis").iterdir())
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
