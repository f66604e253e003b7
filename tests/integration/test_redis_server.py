"""The Redis that tests and ``sluice up`` start: never one they did not start, never open
to a client without its password."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from sluice.embedded.redis_server import RedisServer, RedisServerError, announced_url


def test_a_port_another_redis_took_is_given_up_and_that_redis_is_left_alone(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # free_port() can only pick a port that was free; another process may take it
    # before our redis-server binds it (parallel test workers do). The other Redis
    # answers PING too: it must be neither mistaken for ours nor touched.
    other = redis.Redis.from_url(redis_server.url)
    other.set("theirs", "untouched")
    ours = RedisServer(tmp_path / "ours", port=redis_server.port)
    try:
        ours.start(timeout=5)  # a first start moves to a free port
        assert ours.port != redis_server.port
        mine = redis.Redis.from_url(ours.url)
        assert ours.process is not None
        assert int(mine.info("server")["process_id"]) == ours.process.pid
        mine.close()
        # A restart keeps its port, which its clients know: taken, it is refused.
        ours.stop()
        ours.port = redis_server.port
        with pytest.raises(RedisServerError, match="is taken"):
            ours.start(timeout=5)
        assert ours.process is not None and ours.process.poll() is not None
    finally:
        ours.stop()
    assert other.get("theirs") == b"untouched"
    assert redis_server.process is not None
    assert int(other.info("server")["process_id"]) == redis_server.process.pid
    other.close()


def _ping_without_password(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(1024)


@pytest.mark.parametrize(
    "password", [None, 'with spaces, "quotes", \\ and ünïcode'], ids=["generated", "given"]
)
def test_a_client_without_the_password_is_refused(tmp_path: Path, password: str | None) -> None:
    server = (
        RedisServer(tmp_path / "redis")
        if password is None
        else RedisServer(tmp_path / "redis", password=password)
    )
    with server:
        assert _ping_without_password(server.port).startswith(b"-NOAUTH")
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
            pid = int(client.info("server")["process_id"])
        # Not on the command line, which any local user reads with `ps`.
        assert server.password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_other_commands_find_the_announced_server_with_its_password(tmp_path: Path) -> None:
    assert announced_url(tmp_path) is None
    with RedisServer.in_data_dir(tmp_path) as server:
        server.announce()
        url_file, password_file = tmp_path / "redis" / "url", tmp_path / "redis" / "password"
        assert server.password not in url_file.read_text()
        assert password_file.read_text().strip() == server.password
        for private in (url_file, password_file, tmp_path / "redis"):
            mode = private.stat().st_mode & 0o777
            assert mode == (0o700 if private.is_dir() else 0o600)
        announced = announced_url(tmp_path)
        assert announced == server.url
        with redis.Redis.from_url(announced) as client:
            assert client.ping()
        server.withdraw()
        assert announced_url(tmp_path) is None
    # The next `sluice up` on this data dir keeps the password.
    assert RedisServer.in_data_dir(tmp_path).password == server.password
