"""``sluice up`` on a bare data dir: embedded Redis, API, relay and workers in one command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis

from sluice.app.testing import patience, wait_for
from sluice.embedded.redis_server import free_port, with_password


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


def _environment(data: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(SLUICE_DATA_DIR=str(data), SLUICE_PORT=str(port), SLUICE_LOG_LEVEL="info")
    return env


@contextlib.asynccontextmanager
async def _sluice_up(
    tmp_path: Path, env: dict[str, str]
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[str]]]:
    """A running ``sluice up`` and what it printed up to its URL line; killed if the test
    did not stop it. Started with the common umask 022: its own must make data private."""
    log = tmp_path / "up.log"
    umask = os.umask(0o022)
    try:
        with log.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "sluice",
                "up",
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
            )
    finally:
        os.umask(umask)
    try:
        yield process, await _read_until_up(process, log)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.slow
async def test_up_serves_article_views_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port, data = free_port(), tmp_path / "var"
    async with _sluice_up(tmp_path, _environment(data, port)) as (process, printed):
        url = printed[-1].split()[3]
        assert url == f"http://127.0.0.1:{port}"
        assert process.stdout is not None
        docs_line = (await process.stdout.readline()).decode().strip()
        assert docs_line == f"API docs: {url}/docs  operations: {url}/admin"
        [token_line] = [line for line in printed if line.startswith("admin token (shown once")]
        admin_token = token_line.rsplit(" ", 1)[1]
        token_file = data / "admin.token"
        assert token_file.read_text().strip() == admin_token
        assert token_file.stat().st_mode & 0o777 == 0o600
        announced = (data / "redis" / "url").read_text()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/docs") as response:
                assert response.status == 200
                assert response.content_type == "text/html"
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
        assert await asyncio.wait_for(process.wait(), patience(30)) == 0
        assert not (data / "redis" / "url").exists()
        redis_port = int(announced.rsplit(":", 1)[1].split("/")[0])
        assert _nothing_listens(redis_port), "the embedded Redis outlived sluice up"
        assert any(p.name.startswith("appendonly") for p in (data / "redis").iterdir())


def _modes(data: Path) -> dict[str, tuple[bool, int]]:
    """Every path under ``data`` (``data`` itself as "."): is it a directory, its mode."""
    found = {}
    for path in [data, *data.rglob("*")]:
        with contextlib.suppress(FileNotFoundError):  # a temporary file, renamed meanwhile
            mode = path.lstat().st_mode
            found[str(path.relative_to(data))] = (stat.S_ISDIR(mode), stat.S_IMODE(mode))
    return found


def _refused_without_password(port: int) -> bytes:
    """What the Redis on ``port`` answers a PING from a client that sent no password."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(1024)


@pytest.mark.slow
async def test_up_keeps_its_data_private_and_its_redis_behind_a_password(
    tmp_path: Path,
) -> None:
    port, data = free_port(), tmp_path / "var"
    env = _environment(data, port)
    async with _sluice_up(tmp_path, env) as (process, printed):
        url = printed[-1].split()[3]
        async with aiohttp.ClientSession() as http:
            body = {"email": "ada@example.org", "password": "correct horse battery"}
            async with http.post(f"{url}/v1/users", json=body) as response:
                assert response.status == 201

            async def mailed() -> bool:  # the welcome mail, written by the mail worker
                return any((data / "mail").glob("*.eml"))

            await wait_for(mailed)

        # Another local user can reach the port, and is refused without the password,
        # which is on no command line (`ps`) and in no output.
        address = (data / "redis" / "url").read_text().strip()
        password = (data / "redis" / "password").read_text().strip()
        assert password not in address
        redis_port = int(address.rsplit(":", 1)[1].split("/")[0])
        assert _refused_without_password(redis_port).startswith(b"-NOAUTH")
        with redis.Redis.from_url(with_password(address, password)) as owner:
            server_pid = int(owner.info("server")["process_id"])
        assert password not in Path(f"/proc/{server_pid}/cmdline").read_text()
        assert not any(password in line for line in printed)
        # Other commands on the data dir use it, password included.
        status = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sluice",
            "status",
            "--json",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await status.communicate()
        assert status.returncode == 0, err.decode()
        assert any(s["stream"] == "sluice:users" for s in json.loads(out)["streams"])

        # While it runs (the WAL exists until the last connection closes): the data dir
        # and every directory under it 0700, every file 0600.
        modes = _modes(data)
        assert {".", "redis", "mail", "metrics"} <= {
            n for n, (is_dir, _) in modes.items() if is_dir
        }
        for name in ("sluice.db", "sluice.db-wal", "admin.token", "redis/url", "redis/password"):
            assert name in modes
        assert any(name.startswith("redis/appendonly") for name in modes)  # Redis 7: a dir
        assert any(name.startswith("mail/") and name.endswith(".eml") for name in modes)
        assert any(name.startswith("metrics/") and name.endswith(".db") for name in modes)
        open_to_others = {
            name: oct(mode)
            for name, (is_dir, mode) in modes.items()
            if mode != (0o700 if is_dir else 0o600)
        }
        assert open_to_others == {}
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), patience(30)) == 0
    assert password not in (tmp_path / "up.log").read_text()
