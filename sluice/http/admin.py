"""Admin routes: the operator's view of the streams, dead letters and the history's size
(admin token required).

Dead letters are listed newest first, every partition's together. A dead
letter's id (``streams.dead_letters``) is unique within its group only (each
group has its own dead-letter stream per partition), so redrive and drop take
the group from the ``group`` query parameter when one is given, and otherwise
look the id up in every known group's dead letters: found in none is 404, found
in several is 409 (name the group, or the partition, to choose). An id that is
no dead letter id at all, or names a partition that does not exist, is 404 too,
saying so.
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
from sluice.streams.dead_letters import (
    Place,
    held_by,
    list_dead_letters,
    parse_dead_id,
    places_holding,
)
from sluice.streams.failures import Failures
from sluice.streams.maintenance import status

STATUS_TIMEOUT = 5.0
DEAD_LETTERS_DEFAULT = 50
DEAD_LETTERS_MAX = 1000


class Redriven(msgspec.Struct, kw_only=True, frozen=True):
    """A dead letter sent back to its group: ``retry_id`` is its entry on the retry stream
    of its partition."""

    id: str
    group: str
    partition: int
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


async def _locate(request: web.Request) -> Place:
    """Where the dead letter is; 404 if no group holds it, 409 if several places do."""
    candidates = _groups(request)
    text = request.match_info["id"]
    keys = request.app[KEYS]
    try:
        dead = parse_dead_id(text, keys.partitions)
    except ValueError as exc:
        raise NotFound(str(exc)) from None
    holding = await places_holding(request.app[REDIS], keys, candidates, dead)
    if not holding:
        raise NotFound(f"no dead letter {text!r}")
    if len(holding) > 1:
        several_groups = len({place.group for place in holding}) > 1
        choose = "choose one with ?group=" if several_groups else "use the id with its partition"
        raise Conflict(
            f"dead letter {text!r} is held by several ({held_by(keys, holding)}); {choose}"
        )
    return holding[0]


def _failures(request: web.Request, place: Place) -> Failures:
    return Failures(request.app[REDIS], request.app[KEYS], place.group, place.partition)


async def redrive(request: web.Request) -> web.Response:
    await require_admin(request)
    async with _redis_answers("the dead letter was not redriven"):
        place = await _locate(request)
        retry_id = await _failures(request, place).redrive(place.entry)
    dead_id = place.public_id(request.app[KEYS])
    if retry_id is None:  # taken by another operator between the lookup and the move
        raise NotFound(f"no dead letter {dead_id!r}")
    redriven = Redriven(id=dead_id, group=place.group, partition=place.partition, retry_id=retry_id)
    return json_response(redriven, 202)


async def drop(request: web.Request) -> web.Response:
    await require_admin(request)
    async with _redis_answers("the dead letter was not dropped"):
        place = await _locate(request)
        dropped = await _failures(request, place).drop(place.entry)
    if not dropped:
        raise NotFound(f"no dead letter {place.public_id(request.app[KEYS])!r}")
    return web.Response(status=204)
