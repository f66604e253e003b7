"""What tracing costs: CPU instructions per redirect and per event with OpenTelemetry
tracing off and on, side by side (docs/guides/tracing.md, "What tracing costs").

Run by hand: ``.venv/bin/python bench/tracing_cost.py [--seconds 20] [--events 20000]
[--store sqlite] [--only redirects,events] [--no-readme]``. Needs ``valgrind`` and
``wrk`` (``apt-get install -y valgrind wrk``) and the ``otel`` extra (the dev lock has it).

Tracing is turned on as a user turns it on: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and
``OTEL_SERVICE_NAME``) in the process's environment, nothing else, so the SDK's defaults
apply (its batch span processor, parent-based always-on sampling). The endpoint is an
OTLP/HTTP sink in this process (``otlp_sink.py``) that counts the spans and drops them:
the measured process does the exporter's whole work (batching, protobuf encoding, the
HTTP posts) and no collector's. Before the counters are dumped, each run waits until the
spans of the counted work have reached the sink (the batch processor posts every 5 s),
so the counted window holds their export too.

- **Per redirect** (``redirect_cost.py``'s API process under callgrind, ``wrk -c8``):
  ``sluice`` (a cached link answered by the fast path, which with tracing on makes the
  redirect's SERVER span where it answers) and ``full-path`` (the fast paths switched
  off: the app's router, middleware and view, whose middleware makes the span), each
  with tracing off and on.
- **Per event** (``consumer_cost.py``'s consumer under callgrind): the ``article-views``
  projection (the per-event figure of bench/README.md's other sections; a projection
  makes one CONSUMER span per batch, linked to its events) and ``no-op``, a
  handler group whose handler does nothing, where tracing adds a CONSUMER span per event.
  With tracing on, each event is stored with a traceparent of its own, as if each came
  from a request of its own: a batch's span has a link per event, the worst case.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys

import consumer_cost
import redirect_cost
from otlp_sink import Sink
from readme import record
from stores import Stores, parse_stores, postgres_version

PARTS = ("redirects", "events")


def parse_parts(value: str) -> list[str]:
    parts = [p for p in value.split(",") if p]
    if unknown := set(parts) - set(PARTS):
        raise argparse.ArgumentTypeError(f"unknown: {', '.join(sorted(unknown))}")
    return parts


def _after(sink: Sink, before: int, n: int) -> None:
    """Until the sink has ``n`` spans more than ``before``."""
    sink.wait(before + n)


def redirects(sink: Sink, seconds: int, flush_ms: int) -> list[str]:
    """The rows of the redirect table: the fast path and the ordinary one, each off and on."""
    rows = []
    offs: dict[str, float] = {}
    for variant, label in (
        ("sluice", "the fast path (a cached link; on: its SERVER span made there)"),
        ("full-path", "the ordinary path through the app (fast paths switched off)"),
    ):
        requests, off = redirect_cost.measure(variant, seconds, flush_ms)
        offs[variant] = off
        print(f"redirect, tracing off, {variant}: {off:,.0f} ({requests:,})", flush=True)
        before = sink.spans
        requests, on = redirect_cost.measure(
            variant,
            seconds,
            flush_ms,
            otel=sink.env("api"),
            exported=functools.partial(_after, sink, before),
        )
        spans = sink.spans - before
        print(f"redirect, tracing on, {variant}: {on:,.0f} ({requests:,}, {spans:,} spans)")
        rows.append(
            f"| per redirect (`GET /{{code}}`), {label} "
            f"| {off / 1000:,.0f}k | {on / 1000:,.0f}k | **{on / off:.2f}** |"
        )
    # Sampled out: the sampler (here, every request) leaves the redirect's span out: not
    # recorded, not exported; what a busy service pays for the requests it does not keep.
    sampled_out = {**sink.env("api"), "OTEL_TRACES_SAMPLER": "always_off"}
    requests, out = redirect_cost.measure("sluice", seconds, flush_ms, otel=sampled_out)
    print(f"redirect, tracing on, sampled out: {out:,.0f} ({requests:,})", flush=True)
    rows.append(
        "| per redirect (`GET /{code}`), the fast path, tracing on but the span sampled out "
        f"(`OTEL_TRACES_SAMPLER=always_off`) | {offs['sluice'] / 1000:,.0f}k "
        f"| {out / 1000:,.0f}k | **{out / offs['sluice']:.2f}** |"
    )
    return rows


def events(sink: Sink, n: int, stores: list[str]) -> list[str]:
    """The rows of the per-event table."""
    rows = []
    with Stores(stores) as running:
        for store in stores:
            for group in ("article-views", "no-op"):
                off = consumer_cost.measure(running, store, n, group=group)
                before = sink.spans
                on = consumer_cost.measure(running, store, n, group=group, otel=sink.env("worker"))
                spans = (sink.spans - before) / n
                print(f"{store} {group}: off {off:,.0f}, on {on:,.0f} ({spans:.2f} spans/event)")
                rows.append(
                    f"| per event, `{group}` on {store} ({spans:.2f} spans per event) "
                    f"| {off:,.0f} | {on:,.0f} | **{on / off:.2f}** |"
                )
    return rows


def main(args: argparse.Namespace) -> int:
    for tool in ("valgrind", "callgrind_control", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH: apt-get install -y valgrind wrk")
    rows = []
    with Sink() as sink:
        if "redirects" in args.only:
            rows += redirects(sink, args.seconds, args.flush_ms)
        if "events" in args.only:
            rows += events(sink, args.events, args.store)
    table = "\n".join(
        [
            "CPU instructions (callgrind), tracing off and on (OTLP/HTTP to a local sink,"
            " the SDK's batch processor):",
            "",
            "| figure | tracing off | tracing on | on / off |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if not args.no_readme:
        postgres = "events" in args.only and "postgres" in args.store
        extra = f"PostgreSQL {postgres_version()}" if postgres else ""
        title = "tracing_cost.py: what tracing costs per redirect and per event"
        record("tracing", title, table, extra=extra)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20, help="wrk time per redirect run")
    parser.add_argument("--flush-ms", type=int, default=150, help="SLUICE_VISIT_FLUSH_MS")
    parser.add_argument("--events", type=int, default=20_000, help="events per consumer run")
    parser.add_argument("--store", type=parse_stores, default=["sqlite"])
    parser.add_argument("--only", type=parse_parts, default=list(PARTS), help="redirects,events")
    parser.add_argument("--no-readme", action="store_true")
    sys.exit(main(parser.parse_args()))
