"""``GET /metrics``: Prometheus text for the admin token.

Counters come from every sluice process on this host (``sluice.telemetry.prometheus``); the
state of streams, groups and the relay is read from Redis and the database at
scrape time. With Redis down the scrape still answers, with
``sluice_redis_up 0`` and without the stream gauges.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import datetime

import structlog
from aiohttp import web
from prometheus_client.core import Metric

from sluice.aio.waiting import wait_or_stop
from sluice.flow.view import FlowStatus, flow_status, group_flows
from sluice.history.size import HistorySize, measure
from sluice.http.app_keys import APPS, CONFIG, KEYS, PUBLISHERS, REDIS, STORE
from sluice.http.auth import require_admin
from sluice.http.degrade import REDIS_ERRORS
from sluice.http.route_docs import ADMIN, FORBIDDEN, UNAUTHORIZED, Route
from sluice.records.maintenance import Status, group_totals, status
from sluice.records.pause import paused_gauge
from sluice.store.errors import database_unavailable
from sluice.telemetry.prometheus import (
    CONTENT_TYPE,
    REQUEST_TALLY,
    ScrapedGauge,
    render,
)

log = structlog.get_logger(__name__)

SCRAPE_TIMEOUT = 2.0
PUBLISH_EVERY = 1.0


# Measured at each scrape (declared here, once, so the reference lists them).
REDIS_UP = ScrapedGauge("sluice_redis_up", "1 when Redis answered this scrape")
RELAY_BACKLOG = ScrapedGauge(
    "sluice_relay_backlog", "Committed events the relay has not published yet"
)
DELAYED = ScrapedGauge("sluice_delayed_retries", "Retries waiting for their backoff")
STREAM_LENGTH = ScrapedGauge("sluice_stream_length", "Entries in the stream", ["stream"])
# Where each stream is, to join on by ``stream``: a family of its own, so the series of
# the gauges above stay the ones scrapes before partitions knew.
STREAM_INFO = ScrapedGauge(
    "sluice_stream_info",
    "The stream's partition and, on a cluster, its primary (1)",
    ["stream", "partition", "node"],
)
GROUP_LAG = ScrapedGauge(
    "sluice_group_lag", "Entries not yet delivered to the group", ["stream", "group"]
)
GROUP_PENDING = ScrapedGauge(
    "sluice_group_pending", "Entries delivered, not acked", ["stream", "group"]
)
GROUP_CONSUMERS = ScrapedGauge(
    "sluice_group_consumers", "Consumers in the group", ["stream", "group"]
)
DEAD_LETTERS = ScrapedGauge("sluice_dead_letters", "Entries in the group's dead letters", ["group"])
STALLED = ScrapedGauge(
    "sluice_consumers_stalled",
    "Consumers holding entries that acked none for SLUICE_STALL_SECONDS",
    ["group"],
)
HISTORY = (
    ScrapedGauge("sluice_history_hot_events", "Events in the hot events table (from its seq span)"),
    ScrapedGauge("sluice_history_segments", "Archive segments"),
    ScrapedGauge("sluice_history_archived_events", "Events in archive segments"),
    ScrapedGauge("sluice_history_archived_bytes", "Bytes of archive segments"),
)
# Of each group with flow control, from one script in its slot (``sluice.flow.view``).
FLOW_WAITING_ENTRIES = ScrapedGauge(
    "sluice_flow_waiting_entries", "Entries waiting for their key's turn (flow control)", ["group"]
)
FLOW_WAITING_KEYS = ScrapedGauge(
    "sluice_flow_waiting_keys", "Keys with entries waiting for their turn (flow control)", ["group"]
)
FLOW_SLOTS = ScrapedGauge(
    "sluice_flow_slots_in_use",
    "Entries in handling of the keys with waiting entries (flow control)",
    ["group"],
)
OLDEST_EVENT = ScrapedGauge(
    "sluice_history_oldest_event_timestamp_seconds", "The oldest event's time"
)


def _families(report: Status | None, groups: Iterable[str]) -> list[Metric]:
    redis_up = REDIS_UP.family()
    redis_up.add_metric([], 0 if report is None else 1)
    if report is None:
        return [redis_up]
    backlog = RELAY_BACKLOG.family()
    backlog.add_metric([], report.relay_backlog)
    delayed = DELAYED.family()
    delayed.add_metric([], report.delayed)
    length, where = STREAM_LENGTH.family(), STREAM_INFO.family()
    lag, pending = GROUP_LAG.family(), GROUP_PENDING.family()
    consumers, dead = GROUP_CONSUMERS.family(), DEAD_LETTERS.family()
    for stream in report.streams:
        length.add_metric([stream.stream], stream.length)
        where.add_metric([stream.stream, str(stream.partition), stream.node or ""], 1)
        for group in stream.groups:
            labels = [stream.stream, group.group]
            if group.lag is not None:
                lag.add_metric(labels, group.lag)
            pending.add_metric(labels, group.pending)
            consumers.add_metric(labels, group.consumers)
    for total in group_totals(report):
        dead.add_metric([total.group], total.dead_letters)
    stalled = STALLED.family()
    by_group = Counter(s.group for s in report.stalled)
    for total in group_totals(report):
        stalled.add_metric([total.group], by_group.get(total.group, 0))
    shown = [redis_up, backlog, delayed, length, where, lag, pending, consumers, dead, stalled]
    return [*shown, paused_gauge(groups, report.paused)]


def _history_families(size: HistorySize | None) -> list[Metric]:
    if size is None:
        return []
    figures = (size.hot_events, size.segments, size.archived_events, size.archived_bytes)
    families: list[Metric] = []
    for declared, value in zip(HISTORY, figures, strict=True):
        family = declared.family()
        family.add_metric([], value)
        families.append(family)
    if size.oldest_event_at is not None:
        oldest = OLDEST_EVENT.family()
        oldest.add_metric([], datetime.fromisoformat(size.oldest_event_at).timestamp())
        families.append(oldest)
    return families


def _flow_families(reports: Iterable[FlowStatus]) -> list[Metric]:
    entries, keys, slots = (
        FLOW_WAITING_ENTRIES.family(),
        FLOW_WAITING_KEYS.family(),
        FLOW_SLOTS.family(),
    )
    for report in reports:
        entries.add_metric([report.group], report.entries_waiting)
        keys.add_metric([report.group], report.keys_waiting)
        slots.add_metric([report.group], report.slots_in_use)
    return [entries, keys, slots]


async def _flows(request: web.Request) -> list[FlowStatus]:
    """Each flow group's state; none when Redis does not answer in time."""
    flows = group_flows(request.app[APPS].flows, request.app[CONFIG])
    redis, keys = request.app[REDIS], request.app[KEYS]
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT):
            return [await flow_status(redis, keys, g, flows[g], top=0) for g in sorted(flows)]
    except REDIS_ERRORS as exc:
        log.warning("metrics: redis did not answer", error=repr(exc))
        return []


async def _history(request: web.Request) -> HistorySize | None:
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT):
            return await measure(request.app[STORE])
    except Exception as exc:
        if not (isinstance(exc, TimeoutError) or database_unavailable(exc)):
            raise
        log.warning("metrics: the database did not answer", error=repr(exc))
        return None


async def publish_counters(app: web.Application) -> AsyncIterator[None]:
    """Once a second, what the request path counted in plain numbers is added to the
    shared counters (a prometheus-client increment per redirect costs more than this):
    the request tally, and what each app's context put in ``PUBLISHERS`` (the links
    app's cache lookups and visits). Set up before the apps' contexts, stopped after."""
    publishers: list[Callable[[], None]] = []
    app[PUBLISHERS] = publishers
    stop = asyncio.Event()

    def publish() -> None:
        for publisher in publishers:
            publisher()
        REQUEST_TALLY.publish()

    async def every_second() -> None:
        while not stop.is_set():
            await wait_or_stop(stop, PUBLISH_EVERY)
            publish()

    task = asyncio.create_task(every_second())
    try:
        yield
    finally:
        stop.set()
        await task


async def metrics(request: web.Request) -> web.Response:
    await require_admin(request)
    report: Status | None = None
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT):
            report = await status(
                request.app[REDIS],
                request.app[KEYS],
                request.app[STORE],
                request.app[CONFIG].stall_seconds,
            )
    except REDIS_ERRORS as exc:
        log.warning("metrics: redis did not answer", error=repr(exc))
    families = _families(report, request.app[APPS].groups)
    if report is not None:
        families += _flow_families(await _flows(request))
    families += _history_families(await _history(request))
    body = await asyncio.to_thread(render, families)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


ROUTES = (
    Route(
        "GET",
        "/metrics",
        metrics,
        {
            "operationId": "metrics",
            "summary": (
                "Prometheus text: counters of every sluice process on the host, stream gauges"
            ),
            "security": ADMIN,
            "responses": {
                "200": {
                    "description": "Prometheus text exposition format",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "401": UNAUTHORIZED,
                "403": FORBIDDEN,
            },
        },
    ),
)
