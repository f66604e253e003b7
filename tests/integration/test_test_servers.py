"""The servers the tests (and ``sluice up``) start give up a port that another process
took between ``free_port`` and their bind, on their first start only.

Parallel test workers pick free ports at the same moment, so two can pick the same
one; a fresh-clone run lost a test to it. A listening socket stands in for the other
process here. (The embedded Redis: tests/integration/test_redis_server.py.)
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from sluice.embedded.postgres_server import PortTaken, PostgresServer
from sluice.embedded.redis_server import free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", free_port()))
        other.listen()
        yield int(other.getsockname()[1])


@pytest.mark.stores("postgres")  # needs the PostgreSQL binaries the postgres store uses
async def test_postgres_moves_off_a_taken_port_on_its_first_start_only(taken_port: int) -> None:
    # Not under tmp_path: the server may run as another user (root starts it as nobody).
    directory = Path(tempfile.mkdtemp(prefix="sluice-test-pg-port-"))
    server = PostgresServer(directory, port=taken_port)
    try:
        server.start()
        assert server.port != taken_port
        connection = await asyncpg.connect(server.url())
        assert await connection.fetchval("SELECT 1") == 1
        await connection.close()
        server.stop()
        server.port = taken_port  # a restart keeps its port: taken, it is refused
        with pytest.raises(PortTaken):
            server.start()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
