"""``GET /v1/admin/history``: the groups' per-minute history of docs/guides/operate.md
(``sluice.records.group_history``) for the operator (admin token).

An unknown group is a 422 naming ``group``, as on ``/v1/admin/dead-letters``; a bad
``minutes`` a 422 naming ``minutes``; both at once, one 422 naming both.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    DependencyDown,
    FieldError,
    Route,
    Unprocessable,
    json_response,
    ok,
    parse_limit,
    problem,
    redis,
    require_admin,
    utcnow,
)
from sluice.app.advanced import APPS, KEYS, MAX_MINUTES, REDIS_ERRORS, SAMPLE_SECONDS
from sluice.app.advanced import GroupHistory as History
from sluice.app.advanced import read_group_history as read_history

MINUTES_DEFAULT = 60
REDIS_SECONDS = 5.0


def _query(request: web.Request) -> tuple[list[str], int]:
    """The groups (absent or empty ``group``: every registered one) and the minutes."""
    errors: list[FieldError] = []
    group = request.query.get("group", "")
    every = request.app[APPS].groups
    groups = [group] if group else sorted(every)
    if group and group not in every:
        known = ", ".join(sorted(every))
        errors.append(FieldError("group", f"unknown group; known: {known}"))
    minutes = parse_limit(request.query.get("minutes", str(MINUTES_DEFAULT)), MAX_MINUTES)
    if minutes is None:
        errors.append(FieldError("minutes", f"must be an integer from 1 to {MAX_MINUTES}"))
    if errors or minutes is None:
        raise Unprocessable("invalid query parameters", errors)
    return groups, minutes


async def group_history(request: web.Request) -> web.Response:
    await require_admin(request)
    groups, minutes = _query(request)
    try:
        async with asyncio.timeout(REDIS_SECONDS):
            history = await read_history(
                redis(request), request.app[KEYS], groups, minutes, utcnow()
            )
    except REDIS_ERRORS as exc:
        raise DependencyDown("Redis does not answer; the history is unavailable") from exc
    return json_response(history)


ROUTES = (
    Route(
        "GET",
        "/v1/admin/history",
        group_history,
        {
            "operationId": "groupHistory",
            "summary": "Per-minute handled, failed, dead-lettered and lag of each group, 24 h back",
            "description": (
                "One item per group (by name), each with one point per UTC minute, oldest first,"
                " the last one the current minute (still filling). `handled`, `failed` (a retry"
                " scheduled) and `dead_lettered` count what every worker did in the minute; 0"
                " where none did anything. `lag` is the entries of the group's streams (every"
                " partition, its retry streams too) not yet delivered to it, as last sampled in"
                " the minute; null where no worker of the group sampled it or Redis could not"
                f" tell. Workers write every {SAMPLE_SECONDS:g} s and when they stop, so the"
                " current minute lags that much. Kept in Redis for 24 hours."
            ),
            "security": ADMIN,
            "parameters": [
                {
                    "name": "group",
                    "in": "query",
                    "required": False,
                    "description": "one group's history; absent or empty: every registered group's",
                    "schema": {"type": "string"},
                },
                {
                    "name": "minutes",
                    "in": "query",
                    "required": False,
                    "description": "how many minutes back, the current one included",
                    "schema": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_MINUTES,
                        "default": MINUTES_DEFAULT,
                    },
                },
            ],
            "responses": {
                "200": ok(History, "each group's minutes, oldest first"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "422": problem(f"unknown group, or minutes not an integer from 1 to {MAX_MINUTES}"),
                "503": problem("Redis does not answer"),
            },
        },
        structs=(History,),
    ),
)
