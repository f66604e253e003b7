"""The API served on a loopback port for a test, as ``sluice api`` serves it."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from aiohttp.test_utils import TestServer
from yarl import URL

from sluice.http import listen
from sluice.http.app_keys import CONFIG


class ServedAsApi(TestServer):
    """A sluice app on a loopback port as ``sluice api`` serves it (``listen``): cached
    redirects answered on the wire (``sluice.http.redirect_wire``) or before the app
    (``sluice.http.fast_redirect``), connections under the deadlines and the cap."""

    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None, **_: Any) -> None:
        if self.runner:
            return
        self._loop = loop
        self.app[CONFIG] = msgspec.structs.replace(self.app[CONFIG], host="127.0.0.1", port=0)
        self.runner, site = await listen(self.app)
        self.host, self.port, self.scheme = "127.0.0.1", site.port, "http"
        self._root = URL(f"http://127.0.0.1:{site.port}")
