"""Console log lines carry no terminal controls from what clients send (finding 9 of
issue 20); the end-to-end case is tests/integration/test_console_logs.py."""

from __future__ import annotations

import io
import logging

import structlog

from sluice.telemetry.logs import (
    REQUEST,
    LineWriter,
    Timestamp,
    WriterLogger,
    console_renderer,
    lean_bound_logger,
    processors,
    stdlib_formatter,
)

HOSTILE = "/\x1b[2J\x1b]0;owned\x07\x9b31m"


def test_console_lines_escape_controls_in_every_value_and_keep_tracebacks_readable() -> None:
    stream = io.StringIO()
    log = structlog.wrap_logger(
        WriterLogger(LineWriter(stream)),
        processors=processors(console_renderer()),
        wrapper_class=lean_bound_logger(logging.INFO),
    )
    token = REQUEST.set(("t" * 32, "GET", HOSTILE, None))
    try:
        log.info("request", status=404, agent="curl\r\nfake line", nested={"k": "\x1b[2J"})
    finally:
        REQUEST.reset(token)
    [line] = stream.getvalue().splitlines()
    assert "\x1b[2J" not in line and "\x07" not in line and "\r" not in line
    assert "fake line" in line  # on the request's line, not a line of its own
    formatter = stdlib_formatter(console_renderer(), Timestamp())
    try:
        raise ValueError("bad \x1b[2J value")
    except ValueError as exc:
        record = logging.LogRecord(
            "aiohttp.server",
            logging.ERROR,
            __file__,
            1,
            "boom \x1b[2J",
            (),
            (type(exc), exc, exc.__traceback__),
        )
    text = formatter.format(record)
    assert "\x1b[2J" not in text
    assert "Traceback (most recent call last):\n" in text  # still one line per frame
