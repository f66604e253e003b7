"""An API client on a real app: this test's SQLite file and its own redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest

from sluice.app.assembly import create_app
from sluice.config import Config
from sluice.http.app_keys import STORE
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client
from tests.api.raw_http import Connect, Wire


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, config: Config) -> Client:
    return await aiohttp_client(create_app(config))


@pytest.fixture
def store(client: Client) -> Store:
    """The app's own store (same SQLite file), to look at what a request wrote."""
    assert client.app is not None
    return client.app[STORE]


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """``await connect(client)``: a raw connection to ``client``'s server (``raw_http.Wire``);
    ``receive_buffer``: the socket's receive buffer, set before it connects (the window
    it offers). Every one opened is closed after the test."""
    opened: list[Wire] = []

    async def open_one(client: Client, receive_buffer: int | None = None) -> Wire:
        sock = socket.socket()
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", client.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        opened.append(Wire(reader, writer))
        return opened[-1]

    yield open_one
    for wire in opened:
        wire.writer.close()
        with contextlib.suppress(ConnectionError):
            await wire.writer.wait_closed()
