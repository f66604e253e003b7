"""docs/reference/metrics.md: every Prometheus metric ``GET /metrics`` shows.

From the catalogue ``sluice.telemetry.prometheus.declared()`` (each metric is made through it), held
to prometheus-client's own registry: a ``sluice_`` family registered there but not
declared, or declared without help, stops generation. The scrape test
(tests/integration/test_metrics.py) holds a real scrape to the same catalogue.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from tools.reference.markdown import code, generated, page, prose, table
from tools.reference.undocumented import Undocumented

PAGE = "metrics.md"


class Described(Protocol):
    """What the generator reads of one declared metric."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def labels(self) -> tuple[str, ...]: ...
    @property
    def documentation(self) -> str: ...
    @property
    def scraped(self) -> bool: ...


def _series(metric: Described) -> str:
    """The names a query uses: a counter's ``_total``, a histogram's three."""
    if metric.kind == "counter":
        return code(f"{metric.name}_total")
    if metric.kind == "histogram":
        return ", ".join(code(f"{metric.name}{end}") for end in ("_bucket", "_sum", "_count"))
    return code(metric.name)


def _rows(metrics: Iterable[Described]) -> Iterable[list[str]]:
    for metric in metrics:
        labels = ", ".join(code(label) for label in metric.labels) or "none"
        yield [_series(metric), metric.kind, labels, prose(metric.documentation)]


INTRO = """\
# Metrics

`GET /metrics` (with the admin token) answers Prometheus text. Counters and histograms
are kept by every sluice process on the host in files under `<data dir>/metrics` (the
multiprocess mode of prometheus-client), so one scrape of any API replica adds up the
workers, the relay, the schedulers and the APIs of that host. Gauges of shared state
(streams, groups, dead letters, the history) are measured from Redis and the database
at each scrape; while Redis is down a scrape still answers, with `sluice_redis_up 0`
and without the stream gauges."""


def render(declared: Sequence[Described], registered: Iterable[str]) -> str:
    """The page; ``registered`` are the family names of prometheus-client's registry."""
    names = {metric.name for metric in declared}
    problems = [
        f"{name} is registered with prometheus-client but "
        "not declared in sluice.telemetry.prometheus"
        for name in sorted(set(registered) - names)
        if name.startswith("sluice_")
    ]
    problems += [
        f"{metric.name} has no help text" for metric in declared if not metric.documentation
    ]
    if problems:
        raise Undocumented(PAGE, problems)
    header = ["Series", "Type", "Labels", "Meaning"]
    return page(
        generated(
            "the metrics declared in sluice/telemetry/prometheus.py "
            "(sluice.telemetry.prometheus.declared)"
        ),
        INTRO,
        "## Counted by the processes",
        table(header, _rows(m for m in declared if not m.scraped)),
        "## Measured at each scrape",
        table(header, _rows(m for m in declared if m.scraped)),
    )
