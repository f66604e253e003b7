"""The redirect path's cheap parts: log lines batched per loop iteration yet in order,
JSON lines with the request context, the same visitor hashes, unique ids."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import json
import logging
import os
import re
import time
import uuid
from typing import Any

import pytest
import structlog
from aiohttp import web
from prometheus_client import Histogram

from sluice.builtin.links.cache import LinkCache, Target
from sluice.events import new_trace_id, uuid7
from sluice.http.visitors import VisitorHasher, visitor_hash
from sluice.telemetry.logs import (
    REQUEST,
    LineWriter,
    Timestamp,
    WriterLogger,
    drop_client_body_errors,
    json_request_line,
    lean_bound_logger,
    processors,
    render_json,
    stdlib_formatter,
)
from sluice.telemetry.prometheus import REQUEST_SECONDS, REQUESTS, RequestTally


class Stream(io.StringIO):
    """Counts the writes, as a file would count system calls."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


async def test_lines_of_one_loop_iteration_are_one_write_and_keep_their_order() -> None:
    stream = Stream()
    writer = LineWriter(stream)
    for i in range(3):
        writer.write(f"line {i}")
    assert stream.writes == 0  # nothing yet: the loop has not finished this iteration
    # A thread has no loop: its line waits for the ones logged before it.
    await asyncio.to_thread(writer.write, "from a thread")
    writer.write("after")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert stream.getvalue().splitlines() == [
        "line 0",
        "line 1",
        "line 2",
        "from a thread",
        "after",
    ]
    assert stream.writes == 2


def test_lines_of_a_loop_that_closed_before_its_flush_are_not_lost() -> None:
    stream = Stream()
    writer = LineWriter(stream)
    loop = asyncio.new_event_loop()

    async def log() -> None:
        writer.write("in the loop")

    loop.run_until_complete(log())
    loop.close()  # the flush it had scheduled never runs
    writer.write("after the loop")
    assert stream.getvalue().splitlines() == ["in the loop", "after the loop"]
    writer.write("another loop's line")  # no loop again: written at once
    writer.flush()  # what configure_logging registers with atexit
    assert stream.getvalue().splitlines()[-1] == "another loop's line"


def test_a_json_line_carries_the_request_and_skips_lower_levels() -> None:
    stream = Stream()
    log = structlog.wrap_logger(
        WriterLogger(LineWriter(stream)),
        processors=processors(render_json),
        wrapper_class=lean_bound_logger(logging.INFO),
    )
    token = REQUEST.set(("t" * 32, "GET", "/abc123", None))
    try:
        log.debug("not written")
        log.info("request", status=302, duration_ms=0.25)
        log.info("%s of %s", "one", "two", stream_id=b"1-0", path="/kept")
        with structlog.contextvars.bound_contextvars(group="link-stats"):
            log.warning("bound")
    finally:
        REQUEST.reset(token)
    first, second, third = (json.loads(line) for line in stream.getvalue().splitlines())
    assert {k: first[k] for k in ("event", "status", "duration_ms", "level")} == {
        "event": "request",
        "status": 302,
        "duration_ms": 0.25,
        "level": "info",
    }
    assert (first["trace_id"], first["method"], first["path"]) == ("t" * 32, "GET", "/abc123")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", first["timestamp"])
    # Interpolated like structlog; bytes as repr() (what JSONRenderer writes); own keys win.
    assert (second["event"], second["stream_id"], second["path"]) == (
        "one of two",
        "b'1-0'",
        "/kept",
    )
    assert (third["group"], third["trace_id"]) == ("link-stats", "t" * 32)


def test_the_fast_request_line_is_the_line_structlog_writes() -> None:
    chain, fast = Stream(), Stream()
    log = structlog.wrap_logger(
        WriterLogger(LineWriter(chain)),
        processors=processors(render_json),
        wrapper_class=lean_bound_logger(logging.INFO),
    )
    request_line = json_request_line(LineWriter(fast), Timestamp())
    # A lone surrogate is what msgspec refuses: both fall back to json's escapes.
    contexts = [
        ("t" * 32, "GET", '/a"b\\\u00e9', None),
        ("t" * 32, "GET", "/x\udc80", None),
        ("t" * 32, "GET", "/r", "client-req-0001"),
        None,
    ]
    for context in contexts:
        token = REQUEST.set(context)
        try:
            log.info("request", status=302, duration_ms=0.25)
            request_line(302, 0.25)
        finally:
            REQUEST.reset(token)
    slow_lines, fast_lines = chain.getvalue().splitlines(), fast.getvalue().splitlines()
    for slow_line, fast_line in zip(slow_lines, fast_lines, strict=True):
        slow, quick = json.loads(slow_line), json.loads(fast_line)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", quick.pop("timestamp"))
        del slow["timestamp"]
        assert list(quick.items()) == list(slow.items())  # same keys and values, same order
    assert len(fast.getvalue().splitlines()) == 4
    assert json.loads(fast.getvalue().splitlines()[2])["request_id"] == "client-req-0001"


def test_the_request_tally_adds_up_to_what_observe_would_count() -> None:
    tally = RequestTally()
    route = "/tally-test/{x}"
    samples = [0.0005, 0.001, 0.002, 0.0025, 0.7, 3.0, 9.0, 0.0005]
    for seconds in samples:
        tally.add("GET", route, 302, seconds)
    tally.add("GET", route, 404, 0.01)
    before = REQUESTS.labels("GET", route, "302")._value.get()
    tally.publish()
    tally.publish()  # nothing new: adds nothing
    assert REQUESTS.labels("GET", route, "302")._value.get() == before + len(samples)
    assert REQUESTS.labels("GET", route, "404")._value.get() == 1
    reference = Histogram(
        "reference_seconds", "", buckets=REQUEST_SECONDS._upper_bounds[:-1], registry=None
    )
    for seconds in [*samples, 0.01]:
        reference.observe(seconds)

    def samples_of(histogram: Any) -> list[tuple[str, dict[str, str], float]]:
        return [(s.name, s.labels, s.value) for s in histogram._samples() if s.name != "_created"]

    ours = samples_of(REQUEST_SECONDS.labels("GET", route))
    assert ours == samples_of(reference)  # every bucket, the count and the sum
    assert ("_count", {}, len(samples) + 1) in ours


def test_the_fast_visitor_hash_is_the_hmac_one() -> None:
    for key in (b"k", os.urandom(32), os.urandom(64), os.urandom(100)):
        hasher = VisitorHasher(key)
        for ip, user_agent in (("203.0.113.9", "Mozilla/5.0"), ("::1", "ü" * 300), ("", "")):
            expected = hmac.new(key, f"{ip}\n{user_agent}".encode(), hashlib.sha256).hexdigest()
            assert hasher(ip, user_agent) == visitor_hash(key, ip, user_agent) == expected


def test_generated_ids_are_well_formed_and_unique_in_forked_children_too() -> None:
    traces = {new_trace_id() for _ in range(10_000)}
    assert len(traces) == 10_000
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) and t != "0" * 32 for t in traces)
    ids = [uuid.UUID(uuid7()) for _ in range(1000)]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in ids)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its generators must not repeat the parent's
        os.write(write, f"{new_trace_id()} {uuid7()}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_trace, child_id = pipe.read().split()
    os.waitpid(pid, 0)
    parent_trace, parent_id = new_trace_id(), uuid7()
    assert child_trace != parent_trace
    assert child_id[-12:] != parent_id[-12:]


def test_trace_ids_sluice_starts_sort_by_the_time_their_trace_began() -> None:
    # Time first: the history's trace index grows at its right edge (bench/trace_ids.py).
    before_ms = time.time_ns() // 1_000_000
    first = new_trace_id()
    while time.time_ns() // 1_000_000 == before_ms:  # the next millisecond
        pass
    later = [new_trace_id() for _ in range(1000)]
    after_ms = time.time_ns() // 1_000_000
    assert all(first < t for t in later)
    assert before_ms <= int(first[:12], 16) < int(later[0][:12], 16) <= after_ms
    assert len({t[12:] for t in later}) == 1000  # 80 random bits each


async def test_cached_answers_fresh_entries_only() -> None:
    now = [0.0]

    async def load(code: str) -> Target | None:
        return Target("https://example.org/", None, False) if code == "known1" else None

    cache = LinkCache(load, max_age=10, unknown_ttl=1, clock=lambda: now[0])
    for code in ("known1", "nosuch"):
        with pytest.raises(KeyError):
            cache.cached(code)  # never read: not cached
        await cache.get(code)
    assert cache.cached("known1") == Target("https://example.org/", None, False)
    assert cache.cached("nosuch") is None
    now[0] = 5.0  # the unknown code's short TTL is over, the link's is not
    assert cache.cached("known1") is not None
    with pytest.raises(KeyError):
        cache.cached("nosuch")


def _record(
    name: str, level: int, message: str, *args: Any, exc: BaseException | None = None
) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord(name, level, __file__, 1, message, args, exc_info)


def test_a_library_record_is_a_json_line_like_sluices_own() -> None:
    formatter = stdlib_formatter(render_json, Timestamp())
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError as exc:
        record = _record("asyncio", logging.ERROR, "Task exception %s", "x", exc=exc)
    token = REQUEST.set(("t" * 32, "GET", "/abc123", None))
    try:
        with structlog.contextvars.bound_contextvars(group="link-stats"):
            line = json.loads(formatter.format(record))
    finally:
        REQUEST.reset(token)
    assert line["group"] == "link-stats"  # a worker's bound context, as on its own lines
    assert line["event"] == "Task exception x"
    assert (line["logger"], line["level"], line["trace_id"]) == ("asyncio", "error", "t" * 32)
    assert line["exception"].startswith("Traceback") and "ZeroDivisionError" in line["exception"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", line["timestamp"])


def test_a_body_the_client_broke_is_not_logged_again_by_aiohttp() -> None:
    broken = web.RequestPayloadError("Can not decode content-encoding: gzip")
    assert not drop_client_body_errors(
        _record("aiohttp.server", logging.ERROR, "Unhandled exception", exc=broken)
    )
    other = _record("aiohttp.server", logging.ERROR, "Unhandled exception", exc=OSError("x"))
    assert drop_client_body_errors(other)
    assert drop_client_body_errors(_record("aiohttp.server", logging.WARNING, "no exception"))
