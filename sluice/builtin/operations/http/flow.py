"""Admin routes over a group's flow control (docs/guides/operate.md, "Operate flow
control"): the group's view with its ``flow`` (null for a group without one), and one
key's waiting entries in order, a page at a time.

An unknown group is a 404, as on ``/v1/admin/groups/{group}/pause``; so is the waiting
list of a group declared without ``flow=``. The key is a query parameter: a key is
any string a flow's key function returns, slashes too.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    FieldError,
    Flow,
    NotFound,
    Route,
    Unprocessable,
    config,
    json_response,
    limit_query,
    ok,
    problem,
    query_limit,
    redis,
    require_admin,
    store,
)
from sluice.app.advanced import (
    APPS,
    KEYS,
    FlowStatus,
    WaitingPage,
    flow_status,
    group_flows,
    pause,
    waiting_entries,
)
from sluice.builtin.operations.http.admin import redis_answers
from sluice.builtin.operations.http.pauses import GROUP_PARAMETER, known_group

WAITING_DEFAULT = 50
WAITING_MAX = 1000


class GroupView(msgspec.Struct, kw_only=True, frozen=True):
    """A handler group: whether it is paused, and its flow control (null: none)."""

    group: str
    paused: bool
    flow: FlowStatus | None


def _flow(request: web.Request, group: str) -> Flow | None:
    """The group's flow as the deployment runs it (its overrides applied)."""
    declared = request.app[APPS].flows
    if group not in declared:
        return None
    return group_flows({group: declared[group]}, config(request))[group]


async def group_view(request: web.Request) -> web.Response:
    await require_admin(request)
    group = known_group(request)
    flow = _flow(request, group)
    paused = group in await pause.paused_groups(store(request))
    report = None
    if flow is not None:
        async with redis_answers("the group's flow control is unavailable"):
            report = await flow_status(redis(request), request.app[KEYS], group, flow)
    return json_response(GroupView(group=group, paused=paused, flow=report))


async def waiting(request: web.Request) -> web.Response:
    await require_admin(request)
    group = known_group(request)
    if _flow(request, group) is None:
        raise NotFound(f"group {group!r} has no flow control (declared without flow=)")
    errors: list[FieldError] = []
    key = request.query.get("key", "")
    if not key:
        errors.append(FieldError("key", "required: the key whose waiting entries to list"))
    limit = query_limit(request, WAITING_DEFAULT, WAITING_MAX)
    cursor = request.query.get("cursor") or None
    if errors:
        raise Unprocessable("invalid query parameters", errors)
    async with redis_answers("the waiting entries are unavailable"):
        try:
            page = await waiting_entries(
                redis(request), request.app[KEYS], group, key, limit, cursor
            )
        except ValueError:
            raise Unprocessable(
                "invalid query parameters",
                [FieldError("cursor", "not a `next_cursor` this API returned")],
            ) from None
    return json_response(page)


_ANSWERS = {
    "401": UNAUTHORIZED,
    "403": FORBIDDEN,
    "503": problem("Redis or the database does not answer"),
}

ROUTES = (
    Route(
        "GET",
        "/v1/admin/groups/{group}",
        group_view,
        {
            "operationId": "adminGroup",
            "summary": "A handler group: paused, and its flow control's keys and slots",
            "description": (
                "`flow` is null for a group declared without `flow=`. Otherwise it gives the "
                "limits as the deployment runs them (`SLUICE_<GROUP>_KEY_CONCURRENCY`, "
                "`_KEY_RATE`, `_RATE` applied) and the state now, read in one step: "
                "`keys_waiting` (keys with entries waiting for their turn), `entries_waiting`, "
                "`deferred_total` and `released_total` (entries parked and released since the "
                "flow state began), `slots_in_use` (entries in handling of the keys with "
                "waiting entries), `tokens` (the overall rate's, null without one) and "
                "`top_keys`: the keys with the most waiting entries, each with its "
                "`slots_in_use` and its rate's `tokens`."
            ),
            "security": ADMIN,
            "parameters": [GROUP_PARAMETER],
            "responses": {
                "200": ok(GroupView, "the group now"),
                "404": problem("no handler group of this name"),
                **_ANSWERS,
            },
        },
        structs=(GroupView,),
    ),
    Route(
        "GET",
        "/v1/admin/groups/{group}/flow/waiting",
        waiting,
        {
            "operationId": "adminFlowWaiting",
            "summary": "One key's entries waiting for their turn, oldest first",
            "description": (
                "The entries of `key` parked by the group's flow control, in the order they "
                "will start (`position` 0 first): each with its event id, type, seq, "
                "partition, deliveries before it waited, and `waiting_since`. `waiting` and "
                "`slots_in_use` are the key's totals now. Entries leave at the head while "
                "you page: the next page (`cursor`: the last page's `next_cursor`) goes on "
                "after the last entry shown, and from the head if it has left."
            ),
            "security": ADMIN,
            "parameters": [
                GROUP_PARAMETER,
                {
                    "name": "key",
                    "in": "query",
                    "required": True,
                    "description": "the key (the value of the flow's key field, or function)",
                    "schema": {"type": "string"},
                },
                limit_query(WAITING_DEFAULT, WAITING_MAX),
                {
                    "name": "cursor",
                    "in": "query",
                    "required": False,
                    "description": "`next_cursor` of the previous page",
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": ok(WaitingPage, "one page; `next_cursor` is null on the last one"),
                "404": problem("no handler group of this name, or it has no flow control"),
                "422": problem(f"no key, limit not 1..{WAITING_MAX}, or a cursor not returned"),
                **_ANSWERS,
            },
        },
        structs=(WaitingPage,),
    ),
)
