"""``sluice up`` on a bare data dir: embedded Redis, API, relay and workers in one command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from sluice.redis_server import free_port
from tests.integration.conftest import wait_for


def _read_url(process: subprocess.Popen[str], within: float = 30.0) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"sluice up exited early with {process.wait()}")
        if line.startswith("sluice is up: "):
            return line.split()[3]
    raise AssertionError("sluice up printed no URL")


@pytest.mark.slow
async def test_up_serves_article_views_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(
        SLUICE_DATA_DIR=str(tmp_path / "var"), SLUICE_PORT=str(port), SLUICE_LOG_LEVEL="warning"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "sluice", "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = _read_url(process)
        assert url == f"http://127.0.0.1:{port}"
        announced = (tmp_path / "var" / "redis" / "url").read_text()
        async with aiohttp.ClientSession() as http:
            for viewer in ("ada", "bob", "ada"):
                async with http.post(
                    f"{url}/v1/articles/intro/views", json={"viewer": viewer}
                ) as response:
                    assert response.status == 202

            async def counted() -> bool:
                async with http.get(f"{url}/v1/articles/intro") as response:
                    return (await response.json())["views"] == 2

            await wait_for(counted)
            async with http.get(f"{url}/v1/articles/top?period=day") as response:
                top = await response.json()
            assert top["items"] == [{"article_id": "intro", "views": 2}]
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        assert not (tmp_path / "var" / "redis" / "url").exists()
        redis_port = int(announced.rsplit(":", 1)[1].split("/")[0])
        assert _nothing_listens(redis_port), "the embedded Redis outlived sluice up"
        assert (tmp_path / "var" / "redis" / "appendonlydir").exists() or any(
            p.name.startswith("appendonly") for p in (tmp_path / "var" / "redis").iterdir()
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _nothing_listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0
