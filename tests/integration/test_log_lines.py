"""What the processes log at the default level (docs/guides/monitoring.md, "Logs"): a
count per handled batch rather than a line per event, and a malformed request without
its bytes (docs/guides/security.md, "What the logs never carry")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.app.assembly import create_app
from sluice.app.testing import Child, wait_answering, wait_for
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from sluice.process.resources import Resources
from tests.link_helpers import CHROME, add_link


def json_lines(log: Path) -> list[dict[str, Any]]:
    lines = []
    for raw in log.read_text().splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line that is not ours
        if isinstance(line, dict):
            lines.append(line)
    return lines


@pytest.mark.topologies("single", "cluster")
async def test_a_visit_handled_by_the_workers_is_one_batch_count_at_info_and_no_line_of_its_own(
    aiohttp_client: Callable[..., Awaitable[Any]],
    config: Config,
    resources: Resources,
    spawn: Callable[..., Child],
    tmp_path: Path,
) -> None:
    """The finding: every visit wrote an info line ``event handled`` per group, whatever
    SLUICE_REDIRECT_LOG said. At the default level a worker now writes one ``events
    handled`` line per batch; the per-event line is at debug."""
    log = tmp_path / "worker.log"
    default = {"SLUICE_LOG_LEVEL": "info"}  # what a deployment runs with (the tests' is warning)
    spawn("relay")
    spawn("worker", "link-stats", log=log, **default)
    await add_link(resources.store, "logged1", "https://example.org/a")
    client = await aiohttp_client(create_app(config))
    answer = await client.get("/logged1", allow_redirects=False, headers={"User-Agent": CHROME})
    assert answer.status == 302

    async def handled() -> bool:
        return any(
            line.get("group") == "link-stats"
            and line["event"] in ("event handled", "events handled")
            for line in json_lines(log)
        )

    await wait_for(handled, timeout=30)
    lines = json_lines(log)
    per_event = [line for line in lines if line["event"] == "event handled"]
    assert not per_event, f"a line per event at {per_event[0]['level']}: {per_event[0]}"
    batches = [line for line in lines if line["event"] == "events handled"]
    assert len(batches) == 1 and batches[0]["level"] == "info", batches
    batch = batches[0]
    assert (batch["group"], batch["events"], batch["failed"]) == ("link-stats", 1, 0)
    assert batch["duration_ms"] >= 0


async def test_a_malformed_request_is_logged_without_its_bytes_or_a_traceback(
    spawn: Callable[..., Child], tmp_path: Path
) -> None:
    """The finding: aiohttp logged a malformed request's raw header line with a traceback,
    so a malformed ``Authorization :`` line put the token in the log."""
    port, log = free_port(), tmp_path / "api.log"
    spawn("api", log=log, SLUICE_PORT=str(port), SLUICE_LOG_LEVEL="info")
    await wait_answering([f"http://127.0.0.1:{port}"])
    secret = "s3cret-token-that-must-stay-out-of-logs"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET /v1/me HTTP/1.1\r\nHost: sluice\r\nAuthorization : Bearer "
        + secret.encode()
        + b"\r\n\r\n"
    )
    assert (await reader.read()).startswith(b"HTTP/1.0 400 ")  # aiohttp answers a bad head so
    writer.close()
    await writer.wait_closed()

    async def logged() -> bool:
        return any(line.get("logger") == "aiohttp.server" for line in json_lines(log))

    await wait_for(logged, timeout=10)
    written = log.read_text()
    assert secret not in written, [t for t in written.splitlines() if secret in t]
    line = next(line for line in json_lines(log) if line.get("logger") == "aiohttp.server")
    assert "exception" not in line, line
    assert line["level"] == "info" and line["event"].startswith("bad request from 127.0.0.1")
