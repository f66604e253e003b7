"""Admin routes: the operator's view of the streams (admin token required)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sluice.errors import DependencyDown
from sluice.http.auth import require_admin
from sluice.http.bodies import json_response
from sluice.http.degrade import REDIS_ERRORS
from sluice.http.keys import KEYS, REDIS, STORE
from sluice.streams.maintenance import status

STATUS_TIMEOUT = 5.0


async def streams(request: web.Request) -> web.Response:
    await require_admin(request)
    try:
        async with asyncio.timeout(STATUS_TIMEOUT):
            report = await status(request.app[REDIS], request.app[KEYS], request.app[STORE])
    except REDIS_ERRORS as exc:
        raise DependencyDown("Redis does not answer; stream status is unavailable") from exc
    return json_response(report)
