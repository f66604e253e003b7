"""Console logs are for an operator's terminal: what a client sends never reaches it as
terminal commands (docs/guides/security.md's spirit; JSON lines escape control characters
already)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from sluice.app.testing import Child, wait_answering, wait_for
from sluice.embedded.redis_server import free_port

# Clear the screen, set the window title, ring the bell; 0x9b is CSI in one byte (C1).
HOSTILE = "/\x1b[2J\x1b]0;owned\x07\x9b31m"
HOSTILE_URL = b"/%1b[2J%1b]0;owned%07%c2%9b31m"


@pytest.mark.stores("sqlite")
async def test_a_request_path_with_terminal_escapes_is_logged_escaped(
    spawn: Callable[..., Child], tmp_path: Path
) -> None:
    """The finding: GET /%1b[2J wrote a raw escape sequence to the operator's terminal."""
    port, log = free_port(), tmp_path / "api.log"
    spawn(
        "api", log=log, SLUICE_PORT=str(port), SLUICE_LOG_FORMAT="console", SLUICE_LOG_LEVEL="info"
    )
    await wait_answering([f"http://127.0.0.1:{port}"])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET " + HOSTILE_URL + b" HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n")
    assert (await reader.read()).startswith(b"HTTP/1.1 404 ")
    writer.close()
    await writer.wait_closed()

    async def logged() -> bool:
        return b"owned" in log.read_bytes()

    await wait_for(logged, timeout=10)
    written = log.read_bytes()
    for raw in (b"\x1b[2J", b"\x1b]0;", b"\x07", "\x9b".encode()):
        assert raw not in written
    line = next(t for t in written.decode().splitlines() if "owned" in t)
    assert "/\\x1b[2J\\x1b]0;owned\\x07\\x9b31m" in line
