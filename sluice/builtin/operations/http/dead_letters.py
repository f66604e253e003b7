"""Admin routes over the dead letters: list, redrive (one or in bulk) and drop (admin
token required).

Dead letters are listed newest first, every partition's together. A dead
letter's id (``streams.dead_letters``) is unique within its group only (each
group has its own dead-letter stream per partition), so redrive and drop take
the group from the ``group`` query parameter when one is given, and otherwise
look the id up in every known group's dead letters: found in none is 404, found
in several is 409 (name the group, or the partition, to choose). An id that is
no dead letter id at all, or names a partition that does not exist, is 404 too,
saying so.

A bulk redrive (``POST /v1/admin/dead-letters/redrive?group=&event_type=``) sends
back every dead letter matching its filters, in every partition. Both filters are
optional, but one at least must be given (422 otherwise): sending every group's
every dead letter back is never what a slip of the hand should do.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    Conflict,
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    json_response,
    limit_query,
    ok,
    problem,
    query_limit,
    redis,
    ref,
    require_admin,
)
from sluice.app.advanced import (
    APPS,
    EVENT_TYPES,
    JSON,
    KEYS,
    DeadLetter,
    Failures,
    Place,
    held_by,
    list_dead_letters,
    parse_dead_id,
    places_holding,
    redrive_matching,
)
from sluice.builtin.operations.http.admin import redis_answers

DEAD_LETTERS_DEFAULT = 50
DEAD_LETTERS_MAX = 1000


class Redriven(msgspec.Struct, kw_only=True, frozen=True):
    """A dead letter sent back to its group: ``retry_id`` is its entry on the retry stream
    of its partition."""

    id: str
    group: str
    partition: int
    retry_id: str


class BulkRedriven(msgspec.Struct, kw_only=True, frozen=True):
    """How many dead letters went back to their groups."""

    redriven: int


def _groups(request: web.Request) -> list[str]:
    """The groups named by ``?group=`` (absent or empty: every known group); 422 if unknown."""
    group = request.query.get("group", "")
    every = request.app[APPS].groups
    if not group:
        return sorted(every)
    if group not in every:
        known = ", ".join(sorted(every))
        raise Unprocessable(
            "invalid query parameters", [FieldError("group", f"unknown group; known: {known}")]
        )
    return [group]


async def dead_letters(request: web.Request) -> web.Response:
    await require_admin(request)
    groups = _groups(request)
    limit = query_limit(request, DEAD_LETTERS_DEFAULT, DEAD_LETTERS_MAX)
    async with redis_answers("dead letters are unavailable"):
        letters = await list_dead_letters(redis(request), request.app[KEYS], groups, limit)
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
    holding = await places_holding(redis(request), keys, candidates, dead)
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
    return Failures(redis(request), request.app[KEYS], place.group, place.partition)


async def redrive(request: web.Request) -> web.Response:
    await require_admin(request)
    async with redis_answers("the dead letter was not redriven"):
        place = await _locate(request)
        retry_id = await _failures(request, place).redrive(place.entry)
    dead_id = place.public_id(request.app[KEYS])
    if retry_id is None:  # taken by another operator between the lookup and the move
        raise NotFound(f"no dead letter {dead_id!r}")
    redriven = Redriven(id=dead_id, group=place.group, partition=place.partition, retry_id=retry_id)
    return json_response(redriven, 202)


def _bulk_filters(request: web.Request) -> tuple[list[str], str | None]:
    """The groups and event type a bulk redrive is for; 422 when neither is given or
    either is unknown (an empty value counts as not given)."""
    group = request.query.get("group", "")
    event_type = request.query.get("event_type", "") or None
    errors = []
    if not group and event_type is None:
        errors.append(FieldError("group", "give a group, an event_type, or both"))
    if event_type is not None and event_type not in EVENT_TYPES:
        known = ", ".join(sorted(EVENT_TYPES))
        errors.append(FieldError("event_type", f"unknown event type; known: {known}"))
    if errors:
        raise Unprocessable("invalid query parameters", errors)
    return _groups(request), event_type


async def redrive_all(request: web.Request) -> web.Response:
    await require_admin(request)
    groups, event_type = _bulk_filters(request)
    async with redis_answers("the dead letters were not redriven"):
        moved = await redrive_matching(redis(request), request.app[KEYS], groups, event_type)
    return json_response(BulkRedriven(redriven=moved), 202)


async def drop(request: web.Request) -> web.Response:
    await require_admin(request)
    async with redis_answers("the dead letter was not dropped"):
        place = await _locate(request)
        dropped = await _failures(request, place).drop(place.entry)
    if not dropped:
        raise NotFound(f"no dead letter {place.public_id(request.app[KEYS])!r}")
    return web.Response(status=204)


_DEAD_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": (
        "the dead letter's id, as listed: its entry id (`ms-seq`) with one stream "
        "partition, `p<partition>-ms-seq` with several (a bare `ms-seq` is then "
        "looked up in every partition); unique within its group"
    ),
    "schema": {"type": "string"},
}
_DEAD_GROUP = {
    "name": "group",
    "in": "query",
    "required": False,
    "description": "the group holding the dead letter; without it, every group is searched",
    "schema": {"type": "string"},
}
# The ``group`` filter of the list and of the bulk redrive.
_GROUPS = {
    "name": "group",
    "in": "query",
    "required": False,
    "description": "one group's dead letters; absent or empty: every group's",
    "schema": {"type": "string"},
}
_DEAD_ERRORS = {
    "401": UNAUTHORIZED,
    "403": FORBIDDEN,
    "404": problem(
        "no dead letter with this id (in the group given), not a dead letter id at all, or "
        "an id naming a partition that does not exist"
    ),
    "409": problem(
        "several groups (name one with ?group=), or several partitions of one (use the id "
        "with its partition), hold a dead letter with this entry id"
    ),
    "422": problem("unknown group"),
    "503": problem("Redis does not answer"),
}

ROUTES = (
    Route(
        "GET",
        "/v1/admin/dead-letters",
        dead_letters,
        {
            "operationId": "listDeadLetters",
            "summary": "Dead letters of one group or of all, newest first",
            "description": (
                "Every partition's dead letters together. `id` is the entry id (`ms-seq`) with "
                "one stream partition, `p<partition>-ms-seq` with several; `partition` the "
                "partition; `stream` the aggregate stream the event came from; `deliveries` how "
                "often it was tried; `error` the last failure."
            ),
            "security": ADMIN,
            "parameters": [
                _GROUPS,
                limit_query(DEAD_LETTERS_DEFAULT, DEAD_LETTERS_MAX),
            ],
            "responses": {
                "200": {
                    "description": "the dead letters",
                    "content": {JSON: {"schema": {"type": "array", "items": ref(DeadLetter)}}},
                },
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "422": problem(f"unknown group, or a limit outside 1..{DEAD_LETTERS_MAX}"),
                "503": problem("Redis does not answer"),
            },
        },
        structs=(DeadLetter,),
    ),
    Route(
        "POST",
        "/v1/admin/dead-letters/redrive",
        redrive_all,
        {
            "operationId": "redriveDeadLetters",
            "summary": "Send every matching dead letter back to its group",
            "description": (
                "Every dead letter of `group` (every group's without it) whose event type is "
                "`event_type` (any without it), in every partition, leaves the dead letters "
                "and joins its group's retry stream with a fresh delivery count. One filter "
                "at least is required. `redriven` counts the letters moved (0 when none "
                "matched); each moves once, also when two redrives run at once."
            ),
            "security": ADMIN,
            "parameters": [
                _GROUPS,
                {
                    "name": "event_type",
                    "in": "query",
                    "required": False,
                    "description": "only dead letters of this event type (`UserRegistered`...)",
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "202": ok(BulkRedriven, "the matching dead letters are back in their groups"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "422": problem("neither group nor event_type given, or an unknown one"),
                "503": problem("Redis does not answer"),
            },
        },
        structs=(BulkRedriven,),
    ),
    Route(
        "POST",
        "/v1/admin/dead-letters/{id}/redrive",
        redrive,
        {
            "operationId": "redriveDeadLetter",
            "summary": "Send a dead letter back to its group, with a fresh delivery count",
            "description": "The entry leaves the dead letters and joins the group's retry stream.",
            "security": ADMIN,
            "parameters": [_DEAD_ID, _DEAD_GROUP],
            "responses": {"202": ok(Redriven, "the entry is back in its group"), **_DEAD_ERRORS},
        },
        structs=(Redriven,),
    ),
    Route(
        "DELETE",
        "/v1/admin/dead-letters/{id}",
        drop,
        {
            "operationId": "dropDeadLetter",
            "summary": "Delete a dead letter for good",
            "security": ADMIN,
            "parameters": [_DEAD_ID, _DEAD_GROUP],
            "responses": {"204": {"description": "dropped"}, **_DEAD_ERRORS},
        },
    ),
)
