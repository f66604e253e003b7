"""CPU instructions per redirect: sluice's parts against a bare aiohttp 302 (docs/benchmarks.md).

Run by hand: ``.venv/bin/python bench/redirect_cost.py [--seconds 10] [VARIANT...]``.
Needs ``valgrind`` and ``wrk`` (``apt-get install -y valgrind wrk``).

Wall-clock throughput on the shared 2-core machine swings by ±20 % between runs
(``bench/redirect.py``). The API process is CPU-bound on one core, so its
instructions per request, counted by callgrind, say what the throughput ratio
can be at best, the same on every run. Each variant is one API process under
callgrind on its own Redis and store: a warm-up, then the counters are zeroed,
``wrk -t1 -c8`` runs for ``--seconds`` and the counters are dumped; instructions
(every thread: the aiosqlite thread's share is included) divided by the
requests wrk completed. Under callgrind the API serves ~100 requests/s, so
``SLUICE_VISIT_FLUSH_MS`` is raised (``--flush-ms``, 150 by default) to keep a
group commit near the size it has at full speed (tens of visits).

Variants (``sluice`` is the real API; the others switch parts of it off):

- ``bare``: the baseline, one aiohttp handler answering the same 302;
- ``sluice``: ``GET /{code}`` as shipped (the fast redirect path, no request line);
- ``full-path``: the same without the fast paths (``sluice.http.fast_redirect`` and the
  wire's), as with tracing on: the app's router and middleware, no request line;
- ``rules``: the same on a link with three redirect rules, none of which matches
  (every fact a rule looks at is worked out: docs/guides/links.md allows only in-process work);
- ``logged``: ``SLUICE_REDIRECT_LOG=all``: the full path through the app's router
  and middleware with its request line at level info (release 1's redirect);
- ``no-write``: the visit is built but not handed to the group commit;
- ``no-visit``: no visit built or recorded (cache lookup and 302 only);
- ``plain-view``: sluice's app and middleware, the view replaced by the bare one;
- ``plain-view-no-middleware``: the same without the middleware: sluice's app
  with its routes and cleanup contexts, nothing else;
- ``traced``: OpenTelemetry tracing on (docs/guides/tracing.md): the redirect's fast
  path off, a SERVER span per redirect, each visit stored under it; the spans go through
  the SDK's batch processor and are encoded as OTLP protobuf, then dropped (no
  collector, no network: what the API process spends on them).

``--agents random`` sends every request with a User-Agent of its own, 500 random
characters (a wrk script), where wrk's requests are otherwise all alike: what a
client costs that defeats the per-User-Agent caches (issue 43, finding 6).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from callgrind import dumped_instructions
from redirect import CODE, RULED, TARGET, create_link, wait_listening

from sluice.app.assembly import assemble
from sluice.embedded.redis_server import RedisServer, free_port

VARIANTS = (
    "bare",
    "sluice",
    "full-path",
    "rules",
    "logged",
    "no-write",
    "no-visit",
    "plain-view",
    "plain-view-no-middleware",
    "traced",
)


def serve(variant: str, port: int) -> None:
    """The API process of one variant (runs under callgrind)."""
    from aiohttp import web

    async def plain(request: web.Request) -> web.Response:
        headers = {"Location": TARGET, "Cache-Control": "private, no-store"}
        return web.Response(status=302, headers=headers)

    if variant == "bare":
        app = web.Application()
        app.router.add_get("/{code}", plain)
        web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)
        return

    from sluice.cli.processes import run_api
    from sluice.config import load_config
    from sluice.process.stop_signals import stop_on_signals
    from sluice.telemetry import tracing
    from sluice.telemetry.logs import configure_logging

    _switch_off(variant, plain)
    if variant == "traced":
        _trace()
    config = load_config()
    configure_logging(config)
    tracing.configure("sluice")  # as ``sluice api`` does: on when OTEL_* ask for it

    async def main() -> None:
        await run_api(assemble(config), stop_on_signals())

    asyncio.run(main())


def _switch_off(variant: str, plain: Any) -> None:
    """Patch out the parts of the API ``variant`` goes without."""
    from aiohttp import web

    import sluice.http
    from sluice.builtin.links.http import fast, redirects
    from sluice.builtin.links.visits import VisitRecorder
    from sluice.config import Config
    from sluice.http import fast_redirect

    if variant in ("no-write", "no-visit"):
        VisitRecorder.record = lambda self, visit: None  # type: ignore[method-assign]
    if variant == "no-visit":

        def no_visit(*args: object) -> None:
            return None

        redirects.visit_of = fast.visit_of = no_visit  # type: ignore[assignment]
    if variant == "full-path":
        fast_redirect.install = lambda server, app: None  # what tracing on turns off
    if variant == "logged" or variant.startswith("plain-view"):
        os.environ["SLUICE_REDIRECT_LOG"] = "all"  # the full path through the app, logged
    if variant.startswith("plain-view"):
        redirects.redirect = plain
    if variant == "plain-view-no-middleware":
        create_app = sluice.http.create_app

        def without_middleware(config: Config) -> web.Application:
            app = create_app(config)
            app.middlewares.clear()  # a list until the runner freezes the app
            return app

        sluice.http.create_app = without_middleware


def _trace() -> None:
    """Tracing on, as ``tracing.configure`` sets it up, but exporting to no collector:
    each batch of spans is encoded as the OTLP exporter would send it, then dropped."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from sluice.telemetry import tracing

    class Encoded(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            encode_spans(spans).SerializeToString()
            return SpanExportResult.SUCCESS

    provider = tracing.new_provider("redirect-cost")
    provider.add_span_processor(BatchSpanProcessor(Encoded()))
    tracing.install(provider)


# wrk's script for --agents random: each request a User-Agent of 500 random characters.
RANDOM_AGENTS = """
local chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ;/()._-"
math.randomseed(os.time())
request = function()
  local t = {}
  for i = 1, 500 do
    local n = math.random(1, #chars)
    t[i] = chars:sub(n, n)
  end
  return wrk.format("GET", nil, {["User-Agent"] = table.concat(t)})
end
"""


def wrk(port: int, seconds: int, code: str = CODE, script: Path | None = None) -> int:
    url = f"http://127.0.0.1:{port}/{code}"
    scripted = ["-s", str(script)] if script is not None else []
    out = subprocess.run(
        ["wrk", "-t1", "-c8", f"-d{seconds}s", *scripted, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]


def measure(
    variant: str,
    seconds: int,
    flush_ms: int,
    agents: str = "fixed",
    *,
    otel: dict[str, str] | None = None,
    exported: Callable[[int], None] | None = None,
) -> tuple[int, float]:
    """(requests, instructions per request) of one variant. ``otel``: the API's OTEL_*
    variables (tracing off without); ``exported(n)`` returns once the first ``n`` requests'
    spans were exported, so that the counted window holds the export of its own spans."""
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OTEL_"))}
        env.update(otel or {})
        env.update(
            SLUICE_DATA_DIR=str(Path(tmp) / "data"),
            SLUICE_REDIS_URL=server.url,
            SLUICE_LOG_FORMAT="json",
            SLUICE_LOG_LEVEL="info",
            SLUICE_PORT=str(port),
            SLUICE_VISIT_FLUSH_MS=str(flush_ms),
        )
        asyncio.run(create_link(env))
        script = None
        if agents == "random":
            script = Path(tmp) / "agents.lua"
            script.write_text(RANDOM_AGENTS)
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--serve",
            variant,
            str(port),
        ]
        with (Path(tmp) / "api.log").open("wb") as log:
            api = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_listening(port, timeout=1200)  # a start under callgrind on a loaded machine
            code = RULED if variant == "rules" else CODE
            warm = wrk(port, 4, code, script)  # warm-up: caches filled, code paths compiled
            if exported is not None:
                exported(warm)
            subprocess.run(
                ["callgrind_control", "-z", str(api.pid)], check=True, capture_output=True
            )
            requests = wrk(port, seconds, code, script)
            if exported is not None:
                exported(warm + requests)
            subprocess.run(
                ["callgrind_control", "-d", str(api.pid)], check=True, capture_output=True
            )
            instructions = dumped_instructions(Path(tmp))
        finally:
            api.send_signal(signal.SIGTERM)
            try:
                api.wait(120)
            except subprocess.TimeoutExpired:
                api.kill()
                api.wait()
    return requests, instructions / requests


def main(args: argparse.Namespace) -> int:
    for tool in ("valgrind", "callgrind_control", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH: apt-get install -y valgrind wrk")
    started = time.monotonic()
    results: dict[str, float] = {}
    print(f"{'variant':28}{'requests':>10}{'instructions/request':>24}")
    for variant in args.variants or VARIANTS:
        requests, per_request = measure(variant, args.seconds, args.flush_ms, args.agents)
        results[variant] = per_request
        print(f"{variant:28}{requests:>10,}{per_request / 1000:>23,.0f}k", flush=True)
    if "bare" in results and "sluice" in results:
        ceiling = results["bare"] / results["sluice"]
        print(
            f"bare / sluice: {ceiling:.2f} (the throughput ratio if the API process were"
            f" the only work on its core; target >= 0.80)"
        )
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", nargs=2, metavar=("VARIANT", "PORT"), help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=int, default=10, help="wrk time per variant")
    parser.add_argument("--flush-ms", type=int, default=150, help="SLUICE_VISIT_FLUSH_MS")
    parser.add_argument(
        "--agents",
        choices=("fixed", "random"),
        default="fixed",
        help="random: a 500-character User-Agent of its own per request",
    )
    parser.add_argument("variants", nargs="*", metavar="VARIANT", help=", ".join(VARIANTS))
    options = parser.parse_args()
    if unknown := set(options.variants) - set(VARIANTS):
        parser.error(f"unknown variant(s): {', '.join(sorted(unknown))}")
    if options.serve:
        serve(options.serve[0], int(options.serve[1]))
    else:
        sys.exit(main(options))
