"""The Redis that tests and ``sluice up`` start: never one they did not start."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from sluice.redis_server import RedisServer, RedisServerError


def test_a_port_another_redis_took_is_refused_and_that_redis_is_left_alone(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # free_port() can only pick a port that was free; another process may take it
    # before our redis-server binds it. The other Redis answers PING too.
    other = redis.Redis.from_url(redis_server.url)
    other.set("theirs", "untouched")
    ours = RedisServer(tmp_path / "ours", port=redis_server.port)
    with pytest.raises(RedisServerError, match="exited at start"):
        ours.start(timeout=5)
    assert ours.process is not None and ours.process.poll() is not None
    assert other.get("theirs") == b"untouched"
    assert redis_server.process is not None
    assert int(other.info("server")["process_id"]) == redis_server.process.pid
    other.close()
