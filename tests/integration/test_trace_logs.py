"""One grep follows a registration: the request's trace id is on the worker's lines, and
a redelivery of it says it was applied before (docs/guides/monitoring.md, "Logs")."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sluice.app.assembly import create_app
from sluice.app.testing import Child, child_env, wait_for
from sluice.config import Config
from sluice.process.resources import redis_client

APPLIED_BEFORE = "event applied before, acked without applying it again"


def lines_with(log: Path, trace_id: str) -> list[dict[str, Any]]:
    found = []
    for raw in log.read_text().splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a non-JSON line (a library warning): not ours
        if isinstance(line, dict) and line.get("trace_id") == trace_id:
            found.append(line)
    return found


async def test_the_request_trace_id_reaches_the_mail_workers_log_lines(
    aiohttp_client: Callable[..., Awaitable[Any]], config: Config, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    # A line per handled event, with its trace id, is at debug (docs/guides/monitoring.md).
    env = child_env(config, SLUICE_LOG_LEVEL="debug")
    children = [Child(["relay"], env).start(), Child(["worker", "mail"], env).start(log)]
    try:
        client = await aiohttp_client(create_app(config))
        response = await client.post(
            "/v1/users", json={"email": "trace@example.org", "password": "correct horse"}
        )
        assert response.status == 201
        trace_id = response.headers["X-Trace-Id"]

        async def mailed_and_handled() -> bool:
            # "event handled" is written after the handler returned, so after "mail sent".
            events = {line["event"] for line in lines_with(log, trace_id)}
            return {"mail sent", "event handled"} <= events

        await wait_for(mailed_and_handled, timeout=30)
        lines = lines_with(log, trace_id)
        handled = [line for line in lines if line["event"] == "event handled"]
        assert handled and handled[0]["group"] == "mail"
        assert handled[0]["event_type"] == "UserRegistered" and handled[0]["level"] == "debug"

        # The same entry delivered again (as after a relay crash between publish and
        # record): the line says it was applied before, not "handled" a second time.
        redis = redis_client(config)
        try:
            [(_, fields)] = await redis.xrange(
                handled[0]["stream"], handled[0]["entry_id"], handled[0]["entry_id"]
            )
            await redis.xadd(handled[0]["stream"], fields)
        finally:
            await redis.aclose()

        async def acked_as_applied_before() -> bool:
            return any(line["event"] == APPLIED_BEFORE for line in lines_with(log, trace_id))

        await wait_for(acked_as_applied_before, timeout=30)
        events = [line["event"] for line in lines_with(log, trace_id)]
        assert (events.count("event handled"), events.count("mail sent")) == (1, 1), events
    finally:
        for child in children:
            child.kill()
