"""Admin routes: the operator's view of the streams, dead letters and the history's size
(admin token required).

Dead letters are listed newest first. A dead letter's id is unique within its
group only (each group has its own dead-letter stream), so redrive and drop
take the group from the ``group`` query parameter when one is given, and
otherwise look the id up in every known group's dead letters: found in none is
404, found in several is 409 (name the group to choose).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
from aiohttp import web

from sluice.errors import Conflict, DependencyDown, FieldError, NotFound, Unprocessable
from sluice.groups import GROUPS
from sluice.history.size import measure
from sluice.http.auth import require_admin
from sluice.http.bodies import json_response, query_limit
from sluice.http.degrade import REDIS_ERRORS
from sluice.http.keys import KEYS, REDIS, STORE
from sluice.streams.dead_letters import groups_holding, is_entry_id, list_dead_letters
from sluice.streams.failures import Failures
from sluice.streams.maintenance import status

STATUS_TIMEOUT = 5.0
DEAD_LETTERS_DEFAULT = 50
DEAD_LETTERS_MAX = 1000


class Redriven(msgspec.Struct, kw_only=True, frozen=True):
    """A dead letter sent back to its group: ``retry_id`` is its entry on the retry stream."""

    id: str
    group: str
    retry_id: str


@asynccontextmanager
async def _redis_answers(what: str) -> AsyncIterator[None]:
    """503 when Redis fails or takes longer than STATUS_TIMEOUT."""
    try:
        async with asyncio.timeout(STATUS_TIMEOUT):
            yield
    except REDIS_ERRORS as exc:
        raise DependencyDown(f"Redis does not answer; {what}") from exc


async def streams(request: web.Request) -> web.Response:
    await require_admin(request)
    async with _redis_answers("stream status is unavailable"):
        report = await status(request.app[REDIS], request.app[KEYS], request.app[STORE])
    return json_response(report)


async def archive(request: web.Request) -> web.Response:
    """The event history's size: the hot table and the archive segments (the database only,
    so it answers while Redis is down)."""
    await require_admin(request)
    return json_response(await measure(request.app[STORE]))


def _groups(request: web.Request) -> list[str]:
    """The groups named by ``?group=`` (absent or empty: every known group); 422 if unknown."""
    group = request.query.get("group", "")
    if not group:
        return sorted(GROUPS)
    if group not in GROUPS:
        known = ", ".join(sorted(GROUPS))
        raise Unprocessable(
            "invalid query parameters", [FieldError("group", f"unknown group; known: {known}")]
        )
    return [group]


async def dead_letters(request: web.Request) -> web.Response:
    await require_admin(request)
    groups = _groups(request)
    limit = query_limit(request, DEAD_LETTERS_DEFAULT, DEAD_LETTERS_MAX)
    async with _redis_answers("dead letters are unavailable"):
        letters = await list_dead_letters(request.app[REDIS], request.app[KEYS], groups, limit)
    return json_response(letters)


async def _locate(request: web.Request) -> tuple[str, str]:
    """The dead letter's (group, id); 404 if no group holds it, 409 if several do."""
    candidates = _groups(request)
    dead_id = request.match_info["id"]
    if not is_entry_id(dead_id):
        raise NotFound(f"no dead letter {dead_id!r}")
    holding = await groups_holding(request.app[REDIS], request.app[KEYS], candidates, dead_id)
    if not holding:
        raise NotFound(f"no dead letter {dead_id!r}")
    if len(holding) > 1:
        raise Conflict(
            f"dead letter {dead_id!r} exists in several groups ({', '.join(holding)}); "
            "choose one with ?group="
        )
    return holding[0], dead_id


async def redrive(request: web.Request) -> web.Response:
    await require_admin(request)
    async with _redis_answers("the dead letter was not redriven"):
        group, dead_id = await _locate(request)
        failures = Failures(request.app[REDIS], request.app[KEYS], group)
        retry_id = await failures.redrive(dead_id)
    if retry_id is None:  # taken by another operator between the lookup and the move
        raise NotFound(f"no dead letter {dead_id!r}")
    return json_response(Redriven(id=dead_id, group=group, retry_id=retry_id), 202)


async def drop(request: web.Request) -> web.Response:
    await require_admin(request)
    async with _redis_answers("the dead letter was not dropped"):
        group, dead_id = await _locate(request)
        dropped = await Failures(request.app[REDIS], request.app[KEYS], group).drop(dead_id)
    if not dropped:
        raise NotFound(f"no dead letter {dead_id!r}")
    return web.Response(status=204)
