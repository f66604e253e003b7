"""structlog setup: JSON lines, or console rendering on a terminal.

Lines are written by ``LineWriter``: inside an event loop it collects the
lines of one loop iteration and writes them with one ``write`` at the end of
it (``loop.call_soon``), so a busy API does not pay a system call per request
line; anywhere else it writes at once, after whatever is still collected, so
lines keep their order. The standard library's records go through it too.

The request being served is one ``ContextVar`` (``REQUEST``), set once per
request by the middleware and merged into every line by ``add_request``;
workers bind their context with ``structlog.contextvars`` as before. The
request summary line, one per request, has a fast path for JSON
(``json_request_line``): the same line, built in one step. With tracing on, a line
written in a span carries its ``trace_id`` and ``span_id`` (``log_spans.add_span``).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

import msgspec
import structlog
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

from sluice.config import Config
from sluice.telemetry import log_spans, tracing
from sluice.telemetry.log_spans import add_span

# (trace_id, method, path, the client's X-Request-ID or None) of the request this code
# runs for, if any.
REQUEST: ContextVar[tuple[str, str, str, str | None] | None] = ContextVar(
    "sluice_request", default=None
)

_encode = msgspec.json.Encoder().encode


def add_request(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Processor: the current request's ``trace_id``, ``method`` and ``path``, and the
    ``request_id`` its client sent, if any."""
    request = REQUEST.get()
    if request is not None:
        event_dict.setdefault("trace_id", request[0])
        event_dict.setdefault("method", request[1])
        event_dict.setdefault("path", request[2])
        if request[3] is not None:
            event_dict.setdefault("request_id", request[3])
    return event_dict


def _fallback(obj: Any) -> Any:
    method = getattr(obj, "__structlog__", None)
    return method() if method is not None else repr(obj)


class Timestamp:
    """Processor: ``timestamp``, ISO 8601 UTC with microseconds, like structlog's
    ``TimeStamper(fmt="iso", utc=True)`` but formatting the date once a second."""

    def __init__(self) -> None:
        self._second: tuple[int, str] = (0, "")

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        event_dict["timestamp"] = self.now()
        return event_dict

    def now(self) -> str:
        now = time.time()
        second = int(now)
        cached, prefix = self._second
        if second != cached:
            prefix = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
            self._second = (second, prefix)
        return f"{prefix}.{int((now - second) * 1e6):06d}Z"


def render_json(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
    """Processor: one JSON object, as structlog's ``JSONRenderer`` writes it, but with msgspec."""
    # msgspec writes bytes as base64 where json writes repr(); rare, so take the slow path.
    if bytes not in map(type, event_dict.values()):
        try:
            return _encode(event_dict).decode()
        except (TypeError, ValueError, OverflowError):
            pass  # a key or a value msgspec cannot take: json's fallback repr() can
    return json.dumps(event_dict, default=_fallback)


# What a terminal takes as commands rather than text: C0 controls (ESC starts its escape
# sequences: a request path with %1b[2J cleared the operator's screen), DEL, and C1
# (0x9b is CSI on its own). Written as the escapes Python's repr uses; JSON lines
# escape them already.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    ord("\t"): "\\t",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
}
# A traceback keeps its lines (sluice writes those); anything else stays on one line.
_CONTROLS_BUT_NEWLINE = {c: escape for c, escape in _CONTROLS.items() if c != ord("\n")}
_MULTILINE = ("exception", "stack")


def escape_controls(event_dict: EventDict) -> EventDict:
    """``event_dict`` with the control characters of its keys and string values escaped
    (the console shows other values by their ``repr``, which escapes them itself)."""
    escaped: EventDict = {}
    for key, value in event_dict.items():
        if isinstance(value, str):
            value = value.translate(_CONTROLS_BUT_NEWLINE if key in _MULTILINE else _CONTROLS)
        escaped[key.translate(_CONTROLS) if isinstance(key, str) else key] = value
    return escaped


def console_renderer() -> Processor:
    """structlog's ``ConsoleRenderer``, fed only printable text."""
    # The chain has formatted any traceback into ``exception`` already (format_exc_info),
    # so the renderer's own exception formatter never runs; naming the plain one keeps
    # structlog before 26.1 from warning that pretty (rich) tracebacks are lost.
    render = structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)

    def render_console(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        return render(logger, method_name, escape_controls(event_dict))

    return render_console


class LineWriter:
    """Writes log lines to ``stream``: batched per event-loop iteration, in order."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._flush_on: asyncio.AbstractEventLoop | None = None  # a flush is scheduled there

    def write(self, line: str) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            if loop is None:
                self._write([*self._take(), line])
                return
            self._lines.append(line)
            if self._flush_on is not loop:  # none scheduled, or on a loop that may never run it
                self._flush_on = loop
                loop.call_soon(self.flush)

    def flush(self) -> None:
        with self._lock:
            self._write(self._take())

    def _take(self) -> list[str]:
        lines, self._lines = self._lines, []
        self._flush_on = None
        return lines

    def _write(self, lines: list[str]) -> None:
        if not lines:
            return
        lines.append("")
        try:
            self._stream.write("\n".join(lines))
            self._stream.flush()
        except (OSError, ValueError):  # stderr closed or gone: nowhere left to log to
            pass


class WriterLogger:
    """The structlog logger (what ``PrintLogger`` is) on top of a ``LineWriter``."""

    def __init__(self, writer: LineWriter) -> None:
        self._write = writer.write

    def msg(self, message: str) -> None:
        self._write(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _WriterHandler(logging.Handler):
    """Standard library records into the same writer, so every line keeps its place."""

    def __init__(self, writer: LineWriter) -> None:
        super().__init__()
        self._writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._writer.write(self.format(record))
        except Exception:
            self.handleError(record)


def _interpolate(event: str, args: tuple[Any, ...]) -> str:
    """``log.info("%s of %s", a, b)`` as structlog does it: one dict argument is a mapping."""
    if len(args) == 1 and isinstance(args[0], dict) and args[0]:
        return event % args[0]
    return event % args


def lean_bound_logger(level: int) -> type[FilteringBoundLogger]:
    """structlog's filtering bound logger for ``level``, with a shorter path per line.

    The same processors, context and level filtering, without structlog's
    generic plumbing (a context copy, two re-packings of the keyword arguments,
    checks of the final processor's return type): the final processor returns
    the line as ``str``, which is all ``WriterLogger`` takes. It matters on the
    request path, which writes a line per request.
    """
    base = structlog.make_filtering_bound_logger(level)

    def emit(self: Any, method_name: str, event: str | None, event_dict: dict[str, Any]) -> Any:
        if self._context:
            event_dict = {**self._context, **event_dict}
        if event is not None:
            event_dict["event"] = event
        try:
            for processor in self._processors:
                event_dict = processor(self._logger, method_name, event_dict)
        except structlog.DropEvent:
            return None
        return self._logger.msg(event_dict)

    def proxy(self: Any, method_name: str, event: str | None = None, **event_kw: Any) -> Any:
        return emit(self, method_name, event, event_kw)

    def info(self: Any, event: str, *args: Any, **kw: Any) -> Any:
        return emit(self, "info", _interpolate(event, args) if args else event, kw)

    methods: dict[str, Any] = {"_proxy_to_logger": proxy}
    if level <= logging.INFO:
        methods["info"] = methods["msg"] = info
    return type(f"Lean{base.__name__}", (base,), methods)


def processors(renderer: Processor, timestamp: Timestamp | None = None) -> list[Processor]:
    """The processor chain of every sluice log line, ending in ``renderer``."""
    return [
        structlog.contextvars.merge_contextvars,
        add_request,
        add_span,
        structlog.processors.add_log_level,
        timestamp or Timestamp(),
        structlog.processors.format_exc_info,
        renderer,
    ]


def json_request_line(writer: LineWriter, timestamp: Timestamp) -> Callable[[int, float], None]:
    """The request summary line as the JSON chain above writes it, built in one step.

    The same keys in the same order as ``log.info("request", status=...,
    duration_ms=...)`` through ``processors(render_json)``; what it leaves out is
    ``merge_contextvars``, which looks through every context variable of the
    request for structlog's and finds none on the request path (the API binds
    its context with ``REQUEST``).
    """
    write = writer.write

    def request_line(status: int, duration_ms: float) -> None:
        request = REQUEST.get()
        if request is None:  # outside a request: what add_request leaves out
            line: dict[str, Any] = {
                "status": status,
                "duration_ms": duration_ms,
                "event": "request",
            }
        else:
            line = {
                "status": status,
                "duration_ms": duration_ms,
                "event": "request",
                "trace_id": request[0],
                "method": request[1],
                "path": request[2],
            }
            if request[3] is not None:
                line["request_id"] = request[3]
        if tracing.ENABLED and (ids := log_spans.current_ids()) is not None:
            line["trace_id"], line["span_id"] = ids  # what add_span writes
        line["level"] = "info"
        line["timestamp"] = timestamp.now()
        try:
            text = _encode(line).decode()
        except (TypeError, ValueError, OverflowError):  # a path msgspec cannot take
            text = render_json(None, "info", line)
        write(text)

    return request_line


# Set by ``configure_logging`` for JSON lines: the request summary line's fast path.
# None (tests, console rendering): the line goes through structlog like any other.
request_line: Callable[[int, float], None] | None = None


def configure_logging(config: Config) -> None:
    level = logging.getLevelNamesMapping().get(config.log_level.upper(), logging.INFO)
    renderer: Processor = console_renderer() if config.log_format == "console" else render_json
    writer = LineWriter(sys.stderr)
    atexit.register(writer.flush)  # what the last loop iteration collected
    logger = WriterLogger(writer)
    timestamp = Timestamp()
    global request_line
    request_line = (
        json_request_line(writer, timestamp)
        if renderer is render_json and level <= logging.INFO
        else None
    )
    structlog.configure(
        processors=processors(renderer, timestamp),
        wrapper_class=lean_bound_logger(level),
        logger_factory=lambda *args: logger,
        # Configured once per process, before any logging: cache the bound loggers
        # instead of rebuilding a proxy on every call (it showed in the redirect profile).
        cache_logger_on_first_use=True,
    )
    # Libraries log through the standard library; keep their warnings visible, as lines
    # like sluice's own.
    handler = _WriterHandler(writer)
    handler.setFormatter(stdlib_formatter(renderer, timestamp))
    logging.basicConfig(level=max(level, logging.WARNING), handlers=[handler])
    server = logging.getLogger("aiohttp.server")
    server.addFilter(drop_client_body_errors)
    server.addFilter(BadRequestLine(level))


def stdlib_formatter(renderer: Processor, timestamp: Timestamp) -> logging.Formatter:
    """Standard library records (aiohttp's, asyncio's) as the lines sluice writes: the same
    keys, ``logger`` for the library's logger, a traceback as ``exception``."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,  # a worker's bound trace id, group
            structlog.stdlib.add_logger_name,
            add_request,
            add_span,
            structlog.processors.add_log_level,
            timestamp,
            structlog.processors.format_exc_info,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )


def drop_client_body_errors(record: logging.LogRecord) -> bool:
    """Filter for ``aiohttp.server``: a body the client broke (not in its Content-Encoding,
    a cut chunk) is already answered 400 and on the request line; aiohttp logs it again
    as an unhandled exception with a traceback when it drains the rest after the answer.

    aiohttp is imported here, not with this module: its records come only once it is
    loaded, and a one-shot command (``sluice replay``) does not pay 0.1 s for it."""
    from aiohttp import web

    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, web.RequestPayloadError)


class BadRequestLine(logging.Filter):
    """Filter for ``aiohttp.server``: a request aiohttp could not parse, logged as one
    line naming the peer and the kind of error, at info, without the request's bytes and
    without a traceback.

    aiohttp answers such a request 400 and logs it at error with its parser's exception,
    whose message quotes the offending line as the client sent it: a malformed
    ``Authorization :`` header put its token in the log. The client's mistake is not the
    operator's error either. ``level``: the configured level (the line is info).
    """

    def __init__(self, level: int) -> None:
        super().__init__()
        self._level = level

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import BadHttpMessage  # as drop_client_body_errors

        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, BadHttpMessage):  # what aiohttp's parser raises
            return True
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else None
        record.msg = "bad request from %s: %s (%s), answered and closed"
        record.args = (peer, type(exc).__name__, exc.code)
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.INFO, "INFO"
        return self._level <= logging.INFO
