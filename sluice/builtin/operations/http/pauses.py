"""Pausing and resuming a handler group (admin token; ``sluice.records.pause``).

Both answer 204 and are idempotent: pausing a paused group keeps its first
``paused_at``, resuming a running one changes nothing. Whether a group is paused
shows in ``GET /v1/admin/streams`` (``paused`` per group).
"""

from __future__ import annotations

from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    NotFound,
    Route,
    problem,
    require_admin,
    store,
)
from sluice.app.advanced import APPS, pause


def known_group(request: web.Request) -> str:
    """The group of the path; 404 when no such group is known."""
    group, every = request.match_info["group"], request.app[APPS].groups
    if group not in every:
        raise NotFound(f"no handler group {group!r}; known: {', '.join(sorted(every))}")
    return group


async def pause_group(request: web.Request) -> web.Response:
    await require_admin(request)
    await pause.pause(store(request), known_group(request))
    return web.Response(status=204)


async def resume_group(request: web.Request) -> web.Response:
    await require_admin(request)
    await pause.resume(store(request), known_group(request))
    return web.Response(status=204)


GROUP_PARAMETER = {
    "name": "group",
    "in": "path",
    "required": True,
    "description": "a handler group (`mail`, `exports`, a projection such as `article-views`)",
    "schema": {"type": "string"},
}
_ANSWERS = {
    "401": UNAUTHORIZED,
    "403": FORBIDDEN,
    "404": problem("no handler group of this name"),
    "503": problem("the database does not answer"),
}

ROUTES = (
    Route(
        "POST",
        "/v1/admin/groups/{group}/pause",
        pause_group,
        {
            "operationId": "pauseGroup",
            "summary": "Pause a handler group on every host",
            "description": (
                "Recorded in the database, so it holds across restarts. Within 2 s the "
                "group's consumers on every host take no new entries, no retries and no "
                "reclaimed entries (each worker process reads the paused groups every 0.5 s "
                "and blocks at most 1 s in a read); a batch in hand when the pause comes "
                "finishes and is acked. The entries wait in the streams, counted as lag. "
                "Pausing a paused group changes nothing."
            ),
            "security": ADMIN,
            "parameters": [GROUP_PARAMETER],
            "responses": {"204": {"description": "the group is paused"}, **_ANSWERS},
        },
    ),
    Route(
        "POST",
        "/v1/admin/groups/{group}/resume",
        resume_group,
        {
            "operationId": "resumeGroup",
            "summary": "Resume a paused handler group",
            "description": (
                "Within 2 s the group's consumers read again and drain the entries that waited. "
                "Resuming a group that is not paused changes nothing."
            ),
            "security": ADMIN,
            "parameters": [GROUP_PARAMETER],
            "responses": {"204": {"description": "the group takes entries again"}, **_ANSWERS},
        },
    ),
)
