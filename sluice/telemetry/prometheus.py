"""Prometheus metrics: counters kept by every process, read by ``GET /metrics``.

Processes started by the ``sluice`` command share ``<data dir>/metrics``
(prometheus-client's multiprocess mode, set up by ``sluice.telemetry.metrics_dir``
before this module is imported), so any API replica's ``/metrics`` adds up the
counters of every sluice process on the host: workers, relay, schedulers and
APIs. Imported in a process without that directory (tests, an embedding
application), the metrics live in the default registry of that process.

Figures that describe shared state (stream lengths, lag, pending, dead
letters, relay backlog) are not counted by anyone; ``/metrics`` reads them
from Redis and the database at scrape time.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass(frozen=True)
class Described:
    """One metric family as ``/metrics`` shows it: what the reference page lists
    (``tools/reference``), and what the scrape test holds ``/metrics`` to."""

    name: str  # the family's name; a counter's sample adds ``_total``
    kind: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    documentation: str
    scraped: bool  # read from Redis and the database at scrape time, not counted


_DECLARED: dict[str, Described] = {}


def _declare(described: Described) -> None:
    if _DECLARED.setdefault(described.name, described) != described:
        raise ValueError(f"metric {described.name} declared twice, differently")


def declared() -> list[Described]:
    """Every metric of the modules imported so far, by name: ``sluice.http`` imports the
    core's, loading an app its own (``App.counter``...); ``/metrics`` shows them."""
    return sorted(_DECLARED.values(), key=lambda d: d.name)


def counter(name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
    _declare(Described(name, "counter", tuple(labels), documentation, scraped=False))
    return Counter(name, documentation, labels)


def histogram(
    name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float]
) -> Histogram:
    _declare(Described(name, "histogram", tuple(labels), documentation, scraped=False))
    return Histogram(name, documentation, labels, buckets=buckets)


def live_sum(name: str, documentation: str) -> Gauge:
    """A gauge each process sets; ``/metrics`` shows the sum over the live processes."""
    _declare(Described(name, "gauge", (), documentation, scraped=False))
    return Gauge(name, documentation, multiprocess_mode="livesum")


class ScrapedGauge:
    """A gauge measured at scrape time (``sluice.http.metrics_route``): declared once, at
    import, so the reference lists it; ``family()`` is a fresh one for each scrape."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str] = ()) -> None:
        self.name, self.documentation, self.labels = name, documentation, list(labels)
        _declare(Described(name, "gauge", tuple(labels), documentation, scraped=True))

    def family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labels)


REQUESTS = counter(
    "sluice_http_requests", "HTTP requests answered, by route", ["method", "route", "status"]
)
_LATENCY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
REQUEST_SECONDS = histogram(
    "sluice_http_request_duration_seconds",
    "HTTP request latency, by route",
    ["method", "route"],
    buckets=_LATENCY_BOUNDS,
)
EVENTS_COMMITTED = counter(
    "sluice_events_committed", "Events committed to the history (outbox), by type", ["type"]
)
RELAY_PUBLISHED = counter("sluice_relay_published_events", "Events the relay published to Redis")
HANDLED = counter("sluice_handled_entries", "Stream entries a group handled and acked", ["group"])
RETRIES = counter("sluice_retries", "Entries scheduled for another delivery, by group", ["group"])
DEAD_LETTERED = counter("sluice_dead_lettered", "Entries moved to the dead letters", ["group"])
FLOW_DEFERRED = counter(
    "sluice_flow_deferred",
    "Entries parked to wait for their key's turn (flow control) or put back to wait (NotYet)",
    ["group"],
)
HANDLER_TIMEOUTS = counter(
    "sluice_handler_timeouts", "Batches cancelled at the group's handler deadline", ["group"]
)
DELIVERIES_RECORDED = counter("sluice_deliveries_recorded", "Delivery attempts written")
DELIVERIES_DROPPED = counter(
    "sluice_deliveries_dropped", "Delivery records dropped: the database refused them too long"
)
HANDLER_SECONDS = histogram(
    "sluice_handler_batch_duration_seconds",
    "Time a group takes to handle one batch of entries",
    ["group"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
TASK_RUNS = counter(
    "sluice_task_runs", "Finished task runs, by task and status", ["task", "status"]
)
TASK_SKIPPED = counter(
    "sluice_task_occurrences_skipped", "Occurrences skipped: a run was in progress", ["task"]
)
LOCK_LOSSES = counter(
    "sluice_task_lock_losses", "Runs stopped because their lock was lost", ["task"]
)
LOCK_RELEASES_GONE = counter(
    "sluice_task_lock_releases_gone", "Releases that found the run's lock already gone", ["task"]
)
CONNECTIONS_REFUSED = counter(
    "sluice_connections_refused",
    "New connections answered 503 and closed unread, by the cap they met: process"
    " (SLUICE_MAX_CONNECTIONS) or address (SLUICE_CONNECTIONS_PER_ADDRESS)",
    ["cap"],
)
WRITE_TIMEOUTS = counter(
    "sluice_write_timeouts",
    "Connections closed because their client read none of its answer for"
    " SLUICE_WRITE_TIMEOUT_SECONDS",
)


class RequestTally:
    """Request counts and latencies by route in plain numbers, added to ``REQUESTS`` and
    ``REQUEST_SECONDS`` by ``publish`` (once a second, by the API).

    In multiprocess mode every prometheus-client increment takes a lock and checks
    the process id; two of them per request showed on the redirect path.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, int], int] = {}
        # (method, route) -> [count per bucket (the last one +Inf), sum of seconds]
        self._latency: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def add(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        latency = self._latency.get((method, route))
        if latency is None:
            latency = self._latency[(method, route)] = ([0] * (len(_LATENCY_BOUNDS) + 1), [0.0])
        # The first bucket whose bound is >= seconds, as Histogram.observe picks it.
        latency[0][bisect.bisect_left(_LATENCY_BOUNDS, seconds)] += 1
        latency[1][0] += seconds

    def publish(self) -> None:
        counts, self._counts = self._counts, {}
        latencies, self._latency = self._latency, {}
        for (method, route, status), n in counts.items():
            REQUESTS.labels(method, route, str(status)).inc(n)
        for (method, route), (buckets, total) in latencies.items():
            # Histogram has no bulk observe; its children keep one value per bucket
            # (not cumulative) and the sum, which is what observe() increments.
            child = REQUEST_SECONDS.labels(method, route)
            child._sum.inc(total[0])
            for i, n in enumerate(buckets):
                if n:
                    child._buckets[i].inc(n)


REQUEST_TALLY = RequestTally()


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class _Snapshot(Collector):
    """Gauges measured at scrape time, handed over as ready metric families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render(live: Iterable[Metric] = ()) -> bytes:
    """Prometheus text: every process's counters, then the scrape-time gauges."""
    directory = multiprocess_dir()
    if directory is not None:
        counted = CollectorRegistry()
        multiprocess.MultiProcessCollector(counted, path=directory)  # type: ignore[no-untyped-call]
    else:
        counted = REGISTRY
    measured = CollectorRegistry()
    measured.register(_Snapshot(live))
    return generate_latest(counted) + generate_latest(measured)
