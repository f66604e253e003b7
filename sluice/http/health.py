"""Liveness and readiness views."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from sluice.http.app_keys import REDIS, STORE
from sluice.http.bodies import json_response
from sluice.http.problems import problem_response
from sluice.http.route_docs import Route, ok, problem
from sluice.http.schemas import Health, Readiness

log = structlog.get_logger(__name__)

CHECK_TIMEOUT = 1.0


async def healthz(request: web.Request) -> web.Response:
    return json_response(Health())


async def _check(name: str, ping: Callable[[], Awaitable[Any]]) -> str:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            await ping()
    except TimeoutError:
        log.warning("readiness check timed out", check=name)
        return "timeout"
    except Exception as exc:  # any failure of a dependency means "not ready", never a 500
        log.warning("readiness check failed", check=name, error=repr(exc))
        return "unavailable"
    return "ok"


async def readyz(request: web.Request) -> web.Response:
    """200 when the database and Redis answer, else 503 naming the ones that did not."""
    database, redis = await asyncio.gather(
        _check("database", request.app[STORE].ping),
        _check("redis", request.app[REDIS].ping),
    )
    checks = {"database": database, "redis": redis}
    failed = [name for name, result in checks.items() if result != "ok"]
    if not failed:
        return json_response(Readiness(status="ok", checks=checks))
    detail = " and ".join(failed) + (" is" if len(failed) == 1 else " are") + " not answering"
    return problem_response(503, detail, checks=checks)


ROUTES = (
    Route(
        "GET",
        "/healthz",
        healthz,
        {
            "operationId": "healthz",
            "summary": "Liveness: 200 while the process runs",
            "responses": {"200": ok(Health, "the process is up")},
        },
        structs=(Health,),
    ),
    Route(
        "GET",
        "/readyz",
        readyz,
        {
            "operationId": "readyz",
            "summary": "Readiness: the database and Redis answer",
            "responses": {
                "200": ok(Readiness, "both dependencies answer"),
                "503": problem("a dependency does not answer; `checks` says which"),
            },
        },
        structs=(Readiness,),
    ),
)
