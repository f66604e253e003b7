"""Raw HTTP/1.1 over a socket, for the tests of what the API writes on the wire
(``sluice.http.redirect_wire``): requests as bytes, responses read back as bytes, and
the link and visits they are about."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sluice.store import Store
from tests.link_helpers import add_link

if TYPE_CHECKING:
    from tests.api.helpers import Client

CODE = "wired1"
URL = "https://example.org/landing?from=wire"


class Wire:
    """One raw connection: requests written as bytes, responses read off it as bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, *heads: bytes) -> None:
        self.writer.write(b"".join(heads))

    async def response(self) -> tuple[str, dict[str, str], bytes]:
        """(status line, headers, body) of the next response."""
        async with asyncio.timeout(10):
            head = (await self.reader.readuntil(b"\r\n\r\n")).decode()
            status, *lines = head.removesuffix("\r\n\r\n").split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines)
            body = await self.reader.readexactly(int(headers.get("Content-Length", "0")))
        return status, headers, body

    async def closed(self) -> bytes:
        """What the server still sends before it closes the connection."""
        async with asyncio.timeout(10):
            return await self.reader.read()


Connect = Callable[..., Awaitable[Wire]]


def get(path: str, *headers: str, version: str = "1.1") -> bytes:
    lines = [f"GET {path} HTTP/{version}", "Host: sluice", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def cached(client: Client, store: Store, code: str = CODE, url: str = URL) -> None:
    """A link, in the cache of the API (a first GET looks it up through the app)."""
    await add_link(store, code, url)
    assert (await client.get(f"/{code}", allow_redirects=False)).status == 302


def visits_stored(store: Store, n: int) -> Callable[[], Awaitable[bool]]:
    async def stored() -> bool:
        async with store.transaction() as tx:
            row = await tx.fetchone("SELECT COUNT(*) FROM events WHERE type = 'LinkVisited'")
        assert row is not None
        return int(row[0]) == n

    stored.__qualname__ = f"{n} visits stored"
    return stored
