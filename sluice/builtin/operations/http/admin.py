"""Admin routes: the state of the streams and the history's size (admin token required)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from sluice.app import (
    ADMIN,
    FORBIDDEN,
    UNAUTHORIZED,
    DependencyDown,
    Route,
    config,
    json_response,
    ok,
    problem,
    redis,
    require_admin,
    store,
)
from sluice.app.advanced import KEYS, REDIS_ERRORS, HistorySize, measure
from sluice.app.advanced import MaintenanceStatus as Status
from sluice.app.advanced import maintenance_status as status

STATUS_TIMEOUT = 5.0


@asynccontextmanager
async def redis_answers(what: str) -> AsyncIterator[None]:
    """503 when Redis fails or takes longer than STATUS_TIMEOUT."""
    try:
        async with asyncio.timeout(STATUS_TIMEOUT):
            yield
    except REDIS_ERRORS as exc:
        raise DependencyDown(f"Redis does not answer; {what}") from exc


async def streams(request: web.Request) -> web.Response:
    await require_admin(request)
    async with redis_answers("stream status is unavailable"):
        report = await status(
            redis(request),
            request.app[KEYS],
            store(request),
            config(request).stall_seconds,
        )
    return json_response(report)


async def archive(request: web.Request) -> web.Response:
    """The event history's size: the hot table and the archive segments (the database only,
    so it answers while Redis is down)."""
    await require_admin(request)
    return json_response(await measure(store(request)))


ROUTES = (
    Route(
        "GET",
        "/v1/admin/streams",
        streams,
        {
            "operationId": "adminStreams",
            "summary": "Streams, groups, pending, lag, dead letters, relay backlog",
            "description": (
                "One item per stream of every partition: `partition` is its number (0 with one "
                "partition), `node` the Redis Cluster primary holding it (`host:port`; null on "
                "one Redis). A group's `dead_letters` on a stream are its dead letters in that "
                "stream's partition; its total is the sum over partitions. `delayed` counts the "
                "retries waiting for their backoff in every partition. `stalled` lists the "
                "consumers holding entries that acked none for SLUICE_STALL_SECONDS (60): "
                "`since_ack_s` is the seconds since their last ack or start (null: never "
                "marked). A group's `paused` is true while it is paused (POST "
                "/v1/admin/groups/{group}/pause); `paused` at the top lists every paused group, "
                "one with no stream yet too. A paused group's consumers are never `stalled`."
            ),
            "security": ADMIN,
            "responses": {
                "200": ok(Status, "the state of the streams"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "503": problem("Redis does not answer"),
            },
        },
        structs=(Status,),
    ),
    Route(
        "GET",
        "/v1/admin/archive",
        archive,
        {
            "operationId": "adminArchive",
            "summary": (
                "The event history's size: hot events, archive segments, bytes, oldest event"
            ),
            "description": (
                "Read from the database alone (answers while Redis is down), from indexes and "
                "the segment index, never a scan. `hot_events` is the events table's seq span "
                "less the archived events inside it: exact on SQLite; on PostgreSQL a rolled-back "
                "append leaves a gap in the sequence that counts as an event. `archived_bytes` is "
                "the compressed size of the segments; `oldest_event_at` the older of the oldest "
                "segment's first event and the table's first event; `head_seq` the highest seq "
                "of the whole history."
            ),
            "security": ADMIN,
            "responses": {
                "200": ok(HistorySize, "the history's size now"),
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
                "503": problem("the database does not answer"),
            },
        },
        structs=(HistorySize,),
    ),
)
